"""Writing a file all at once or not at all (used by save and by every command's -o), and
writing to a descriptor all of it or failing (the CLI's stdout)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import sys


def write_atomically(path: str, data) -> None:
    """Write `data` (bytes, or a list of bytes-like pieces written in order) to `path` all
    at once or not at all: a temporary file in the same directory, flushed, then renamed
    over the target (which stays as it was on failure).

    Only a regular file (or a new one) is replaced that way. A device, FIFO or socket
    (`-o /dev/null`, a named pipe) is written in place: renaming a file over it would
    replace the device node itself. A path naming a descriptor (`/dev/stdout`,
    `/dev/fd/N`) is written to that descriptor. A symlink is followed, so the link stays
    and the file it points to is replaced. Raises OSError, naming `path` (not the
    temporary file, which the caller never heard of)."""
    write_atomically_together([(path, data)])


def write_atomically_together(files: list[tuple[str, object]], before_renames=None) -> None:
    """Several files all or none (as far as renames go): each written to its temporary
    file first, and only when every one is written are they renamed over their targets.
    Destinations written in place (devices, descriptors), then `before_renames()` (the
    CLI's stdout), go after every temporary and before the renames, so a failure anywhere
    leaves every renamed target untouched."""
    staged: list[tuple[str, str]] = []  # (temporary, target)
    in_place: list[tuple[str, object]] = []
    try:
        for path, data in files:
            try:
                if not _stage(path, data, staged):
                    in_place.append((path, data))
            except OSError as error:
                raise OSError(error.errno, error.strerror, path) from None
        for path, data in in_place:
            try:
                _write_in_place(path, data)
            except OSError as error:
                raise OSError(error.errno, error.strerror, path) from None
        if before_renames is not None:
            before_renames()
        with _stop_signals_held():  # all renames or, for a stop before them, none
            for temp, target in staged:
                os.replace(temp, target)
    finally:
        for temp, _ in staged:
            try:
                os.unlink(temp)  # only those not renamed are still there
            except OSError:
                pass


@contextlib.contextmanager
def _stop_signals_held():
    """Hold SIGINT, SIGTERM and SIGHUP back for the block (they arrive after it); in the
    main thread only, where Python handles signals."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _stage(path: str, data, staged: list) -> bool:
    """Write `data` to a new temporary file beside the regular file (or new file) `path`,
    recorded in `staged` as (temporary, target); False for a destination that must be
    written in place. The temporary is recorded before it is created: a stop signal can
    raise right after os.open returns, and the caller's cleanup must know the file then."""
    if descriptor_named(path) is not None:
        return False
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return False
    temp = temporary_beside(target)
    staged.append((temp, target))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        write_all(f, data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(temp, _new_file_mode(target, mode))
    return True


def temporary_beside(target: str, reserve: int = 0) -> str:
    """A new name `.NAME.<pid>.<random>.tmp` in `target`'s directory for building `target`,
    NAME cut short where needed to keep the name (plus `reserve` bytes the caller will add)
    within the directory's longest file name: a legal OUT of 231 to 255 bytes was refused
    "File name too long" for its temporary's sake."""
    directory, base = os.path.split(target)
    tail = f".{os.getpid()}.{os.urandom(4).hex()}.tmp"
    room = _name_max(directory) - len(os.fsencode(f".{tail}")) - reserve
    while base and len(os.fsencode(base)) > room:
        base = base[:-1]  # by characters: a name in UTF-8 is not cut inside one
    return os.path.join(directory, f".{base}{tail}")


def _name_max(directory: str) -> int:
    try:
        return os.pathconf(directory or ".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no such limit known (or no pathconf): POSIX's usual
        return 255


def _write_in_place(path: str, data) -> None:
    fd = descriptor_named(path)
    if fd is not None:  # -o /dev/stdout, or a shell's >(process): that descriptor, as it is
        stream = _sys_stream(fd)
        if stream is not None:
            stream.flush()  # what was printed before goes first
        write_descriptor(fd, data, path)
        return
    with open(os.path.realpath(path), "wb") as f:
        write_all(f, data)


def write_all(f, data) -> None:
    """Write `data` to the binary file object `f`: bytes, or a list of bytes-like pieces
    in order (formats.uop.dump_parts). A short write is followed by one for the rest, which
    raises if the disk is full: a buffered file returns the short count of a large write
    that filled the disk and no error."""
    for part in _pieces(data):
        done, size = f.write(part), memoryview(part).nbytes
        while done is not None and done < size:
            done += f.write(memoryview(part).cast("B")[done:])


def write_descriptor(fd: int, data, name: str) -> int:
    """Write `data` (bytes or pieces) to file descriptor `fd`, all of it, or raise OSError
    naming `name`; returns the byte count."""
    total = 0
    for part in _pieces(data):
        view = memoryview(part).cast("B")
        done = 0
        while done < len(view):
            try:
                done += os.write(fd, view[done:])
            except OSError as error:
                raise OSError(error.errno, error.strerror, name) from None
        total += done
    return total


def _pieces(data):
    return (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data


class DescriptorWriter(io.RawIOBase):
    """A raw stream whose write() writes everything to a descriptor or raises OSError
    naming the stream (`<stdout>`), for the CLI to put under sys.stdout. Python's own
    stdout, when the disk fills during a large write, returns a short count and no error,
    and print() ignores the count: the output would end early with exit status 0."""

    def __init__(self, fd: int, name: str):
        super().__init__()
        self._fd, self._name = fd, name

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        return write_descriptor(self._fd, data, self._name)


_DESCRIPTOR_PATH = re.compile(r"/dev/(?:fd/(\d+)|(stdout)|(stderr))|/proc/self/fd/(\d+)")


def descriptor_named(path: str) -> int | None:
    """The descriptor a path like /dev/stdout, /dev/fd/63 or /proc/self/fd/1 stands for.
    Such a path opened anew would truncate the file a shell redirected there (>> keeps
    what is already in it), and one renamed over would be lost to the shell's reader."""
    match = _DESCRIPTOR_PATH.fullmatch(os.fspath(path))
    if match is None:
        return None
    fd_text, stdout, stderr, proc_fd = match.groups()
    return 1 if stdout else 2 if stderr else int(fd_text or proc_fd)


def _sys_stream(fd: int):
    """Python's text stream on descriptor 1 or 2 (to flush before writing under it)."""
    return {1: sys.stdout, 2: sys.stderr}.get(fd)


def _new_file_mode(path: str, mode: int | None) -> int:
    """An existing file keeps its mode; a new one gets the usual 0666 minus the umask."""
    if mode is not None:
        return mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
