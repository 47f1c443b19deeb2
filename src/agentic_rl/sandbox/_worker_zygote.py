"""The zygote: the process every call's child is forked from, which never held a request.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). Forking each call from the worker itself would copy
its heap into the call: the code, files and output of earlier calls (freed, not erased)
would be readable by the next one. The zygote is forked from the worker once its setup is
done and before it reads any request; it receives only what a child needs before the
code arrives (limits and the work dir, a few numbers, plus the child's ends of its pipes
over ``SCM_RIGHTS``), and the code goes from the worker straight into the child's control
pipe. It double-forks, so the call's child is re-parented to the worker (init of its PID
namespace, or a child subreaper) and the worker waits for and kills it as before.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from collections.abc import Callable

MESSAGE_MAX = 65536


class Zygote:
    """Forks call children on request: ``spawn(params, fds) -> pid``."""

    def __init__(self, child_main: Callable[[dict, tuple], None]) -> None:
        """``child_main(params, fds)`` turns a fresh grandchild into the call's child (never returns)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                _serve(theirs, child_main)
            finally:
                os._exit(0)
        theirs.close()
        self.pid = pid
        self.sock = ours

    def spawn(self, params: dict, fds: tuple) -> int:
        """A new child set up with ``params`` and the descriptors ``fds``; its pid (a child
        of this process by the time it is returned)."""
        socket.send_fds(self.sock, [json.dumps(params).encode()], list(fds))
        reply = self.sock.recv(64)
        if not reply.isdigit():
            raise OSError(f"the sandbox zygote could not fork: {reply.decode(errors='replace')}")
        return int(reply)

    def close(self) -> None:
        self.sock.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (OSError, ChildProcessError):
            pass


def _serve(sock: socket.socket, child_main: Callable[[dict, tuple], None]) -> None:
    """The zygote's loop: one fork per message until the worker closes its end."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        message, fds, _, _ = socket.recv_fds(sock, MESSAGE_MAX, 8)
        if not message:
            return
        try:
            sock.send(str(_double_fork(sock, json.loads(message), tuple(fds), child_main)).encode())
        except OSError as error:
            sock.send(f"error: {error}".encode()[:64])
        finally:
            for fd in fds:
                os.close(fd)


def _double_fork(sock: socket.socket, params: dict, fds: tuple, child_main: Callable[[dict, tuple], None]) -> int:
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read_end)
            child = os.fork()
            if child == 0:
                os.close(write_end)
                sock.close()
                child_main(params, fds)
                os._exit(70)
            os.write(write_end, str(child).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        reply = os.read(read_end, 32)
    finally:
        os.close(read_end)
        os.waitpid(middle, 0)  # gone: its child now belongs to the worker
    if not reply:
        raise OSError("the intermediate process died")
    return int(reply)
