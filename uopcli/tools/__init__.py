"""The library calls behind the commands: differentiate (diff), check (check), inspect
(info, print), values (reading and making input values for -i), intermediates (every node's
value, for eval --keep-intermediates)."""
