"""_async.py - ckptfs.Saver: asynchronous saves over libckptfs'
ckpt_saver.  save_async returns once the state is copied into the saver's
staging memory (by the library's copy threads, the GIL released); encoding,
writing, syncing and the commit go on in the library's background thread.
"""
import ctypes
import threading
import time
import warnings

from . import _capi as C
from ._api import prepare
from ._errors import Error, check, from_c


class SaveHandle(object):
    """One asynchronous save: done() polls, wait() blocks until it is
    committed (or raises the library's error)."""

    def __init__(self, saver, path, handle):
        self.path = path
        self._saver = saver
        self._h = handle
        self._lock = threading.Lock()
        self._error = None
        self._finished = False

    def done(self):
        """True once the save has finished, successfully or not."""
        with self._lock:
            return self._finished or bool(C.lib.ckpt_save_poll(self._h))

    def wait(self, timeout=None):
        """Waits until the save has finished; returns None once the
        checkpoint is committed, raises its error otherwise (a planner
        refusal, an I/O error, ENOSPC: then nothing is committed).  With a
        timeout (seconds), returns False if it has not finished by then,
        True when it has."""
        if timeout is not None:
            end = time.monotonic() + timeout
            while not self.done():
                if time.monotonic() >= end:
                    return False
                time.sleep(min(0.01, max(0.0, end - time.monotonic())))
        with self._lock:
            if not self._finished:
                err = C.Error()
                rc = C.lib.ckpt_save_wait(self._h, ctypes.byref(err))
                self._h = None
                self._finished = True
                self._saver._forget(self)
                if rc < 0:
                    self._error = from_c(rc, err)
            if self._error is not None:
                raise self._error
        return True if timeout is not None else None

    def exception(self):
        """The save's error after it finished (waiting for it), or
        None."""
        try:
            self.wait()
        except Error as exc:
            return exc
        return None


class Saver(object):
    """Owns staging memory (kept across saves), copy threads and a
    background writer.  staging_bytes caps the staging memory (None: no
    cap; a state larger than the cap is staged in slices and save_async
    then returns later); queue_depth saves may be in flight at once.
    See docs/ASYNC.md and docs/PYTHON.md."""

    def __init__(self, staging_bytes=None, *, queue_depth=1,
                 copy_threads=None, nice=None):
        o = C.SaverOpts()
        C.lib.ckpt_saver_opts_init(ctypes.byref(o))
        if staging_bytes is not None:
            o.staging_bytes = int(staging_bytes)
        o.queue_depth = int(queue_depth)
        if copy_threads is not None:
            o.copy_threads = int(copy_threads)
        if nice is not None:
            o.nice = int(nice)
        self._h = ctypes.c_void_p()
        self._lock = threading.Lock()
        self._open = []
        err = C.Error()
        check(C.lib.ckpt_saver_create(ctypes.byref(self._h), ctypes.byref(o),
                                      ctypes.byref(err)), err)

    @property
    def cuda(self):
        """True when this saver reads CUDA tensors straight from the
        device (a libckptfs built with CUDA, a usable device)."""
        return bool(self._h and C.lib.ckpt_saver_cuda(self._h))

    def reserve(self, nbytes):
        """Makes staging memory for nbytes of state now (pinned where the
        saver reads CUDA tensors: about 0.5 s per GiB), so that the first
        save_async does not pay for it in its stall."""
        if int(nbytes) < 0:
            raise ValueError("reserve: %r is not a byte count" % (nbytes,))
        err = C.Error()
        check(C.lib.ckpt_saver_reserve(self._h, int(nbytes),
                                       ctypes.byref(err)), err)

    def save_async(self, path, state, *, codec="auto", level=None,
                   frame_size=None, meta=None, threads=None,
                   allow_pickle=False, sync=True, base=None,
                   full_every=None):
        """Starts saving `state` as the new checkpoint `path` (arguments as
        for ckptfs.save) and returns a SaveHandle as soon as the state is
        staged: the caller may then overwrite its tensors.  Errors found
        before staging (a bad state, a committed or unfinished target)
        raise here, with nothing started."""
        if not self._h:
            raise ValueError("this Saver is closed")
        pieces, opts = prepare(state, allow_pickle, meta,
                               device_ok=self.cuda, codec=codec, level=level,
                               frame_size=frame_size, threads=threads,
                               sync=sync, base=base, full_every=full_every)
        if pieces.device:
            # the library copies on its own streams: let torch's pending
            # work on these tensors finish first
            import torch
            torch.cuda.synchronize()
        h = ctypes.c_void_p()
        err = C.Error()
        with self._lock:
            check(C.lib.ckpt_save_async(self._h, C.fsencode(path),
                                        pieces.array, pieces.n,
                                        ctypes.byref(opts.c), ctypes.byref(h),
                                        ctypes.byref(err)), err)
            handle = SaveHandle(self, path, h)
            self._open.append(handle)
        return handle

    def _forget(self, handle):
        with self._lock:
            if handle in self._open:
                self._open.remove(handle)

    def close(self):
        """Waits for every save still in flight (warning about any that
        failed and was not waited on), then frees the saver."""
        if not self._h:
            return
        for handle in list(self._open):
            exc = handle.exception()
            if exc is not None:
                warnings.warn("ckptfs: save of %s failed: %s"
                              % (handle.path, exc), RuntimeWarning)
        C.lib.ckpt_saver_destroy(self._h)
        self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:   # interpreter shutdown: best effort
            pass
