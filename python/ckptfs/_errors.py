"""_errors.py - the exceptions of the ckptfs package.

Every exception it raises derives from ckptfs.Error.  Failures of the C
library become CheckpointError (an OSError whose errno is the library's
code and whose message is the library's, naming the file, tensor, chunk or
rank); the common errnos also derive from the matching built-in OSError
subclass, so that ``except FileExistsError`` works.  Problems the package
finds in the caller's state dict are UnsupportedError (TypeError),
MismatchError (ValueError) and MissingKeyError (KeyError); a malformed
structure stored in a checkpoint (its python.tree) is TreeError
(ValueError).
"""
import errno as _errno
import os


class Error(Exception):
    """Base class of every ckptfs exception."""


class CheckpointError(Error, OSError):
    """A call into libckptfs failed; ``errno`` and ``str()`` are its code
    and message."""

    def __init__(self, code, message):
        OSError.__init__(self, code, message)

    def __str__(self):
        return self.strerror


class UnsupportedError(Error, TypeError):
    """A value of the state dict that ckptfs does not save as asked (a
    dtype it has no equivalent for, an object without opting in to
    pickling, a key that is not a str or int)."""


class MismatchError(Error, ValueError):
    """Loading into an existing tensor whose dtype or shape differs from
    the checkpoint's."""


class TreeError(Error, ValueError):
    """The structure a checkpoint stores for ckptfs.load (its metadata
    python.tree) is malformed: not the JSON ckptfs.save writes, a node with
    no role or two, an item named twice, nested or sized past the bounds.
    The message says what and where in the tree."""


class MissingKeyError(Error, KeyError):
    """A name the caller asked for is not in the checkpoint."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class CheckpointExistsError(CheckpointError, FileExistsError):
    """CheckpointError of errno EEXIST (e.g. a committed target)."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """CheckpointError of errno ENOENT (a path or file that is not
    there)."""


class CheckpointPermissionError(CheckpointError, PermissionError):
    """CheckpointError of errno EACCES or EPERM."""


class CheckpointNotADirectoryError(CheckpointError, NotADirectoryError):
    """CheckpointError of errno ENOTDIR."""


class CheckpointIsADirectoryError(CheckpointError, IsADirectoryError):
    """CheckpointError of errno EISDIR."""


# Module-level classes, so that the exceptions pickle (DCP sends a rank's
# exception to the others).
_BY_ERRNO = {
    _errno.EEXIST: CheckpointExistsError,
    _errno.ENOENT: CheckpointNotFoundError,
    _errno.EACCES: CheckpointPermissionError,
    _errno.EPERM: CheckpointPermissionError,
    _errno.ENOTDIR: CheckpointNotADirectoryError,
    _errno.EISDIR: CheckpointIsADirectoryError,
}


def error_class(code):
    """CheckpointError, or its subclass that is also the built-in OSError
    subclass for errno `code`."""
    return _BY_ERRNO.get(code, CheckpointError)


def from_c(rc, err):
    """The exception for a library call that returned `rc` (< 0) and
    filled the ckpt_error `err`."""
    code = -int(rc)
    msg = err.msg.decode("utf-8", "replace") if err is not None else ""
    return error_class(code)(code, msg or os.strerror(code))


def check(rc, err):
    """Raises the library's error when rc < 0; returns rc otherwise."""
    if rc < 0:
        raise from_c(rc, err)
    return rc
