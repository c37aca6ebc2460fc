"""The library calls behind the commands: differentiate (diff), check (check), inspect
(info, print), values (reading and making input values for -i)."""
