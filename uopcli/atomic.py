"""Writing a file all at once or not at all (used by save and by every command's -o)."""

from __future__ import annotations

import os
import stat


def write_atomically(path: str, data) -> None:
    """Write `data` (bytes, or a list of bytes-like pieces written in order) to `path` all
    at once or not at all: a temporary file in the same directory, flushed, then renamed
    over the target (which stays as it was on failure).

    Only a regular file (or a new one) is replaced that way. A device, FIFO or socket
    (`-o /dev/null`, `-o /dev/stdout`, a named pipe) is written in place: renaming a file
    over it would replace the device node itself. A symlink is followed, so the link stays
    and the file it points to is replaced. Raises OSError, naming `path` (not the
    temporary file, which the caller never heard of)."""
    try:
        _write(path, data)
    except OSError as error:
        raise OSError(error.errno, error.strerror, path) from None


def _write(path: str, data) -> None:
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "wb") as f:
            write_all(f, data)
        return
    directory, base = os.path.split(target)
    temp = os.path.join(directory, f".{base}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write_all(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, _new_file_mode(target, mode))
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def write_all(f, data) -> None:
    """Write `data` to the binary file object `f`: bytes, or a list of bytes-like pieces
    in order (fileformat.dump_parts)."""
    for part in (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data:
        f.write(part)


def _new_file_mode(path: str, mode: int | None) -> int:
    """An existing file keeps its mode; a new one gets the usual 0666 minus the umask."""
    if mode is not None:
        return mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
