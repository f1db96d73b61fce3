"""The artifact root and the state directories under it are the submitter's own, or refused.

Another local user who creates the root first (a shared ``/tmp``, ``./artifacts`` under a
world-writable directory), or who may write into it, could read every ledger and plant links for
the controller to follow. So before anything under a root is read or written, the root must be
a directory owned by this user that neither its group nor others may write; a state directory
under it (``.temporal/``) must also be no link.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from controller.errors import SetupError


class ArtifactRootUnsafe(SetupError):
    """The artifact root (or a state directory in it) is another user's, or others may write it."""

    reason = "artifact-root-unsafe"


def check_private(directory: Path, what: str = "the artifact root", *, link: bool = True) -> None:
    """Refuse ``directory`` if it exists and is not this user's alone to write.

    ``link=False``: it must not be a symbolic link either (a state directory the controller
    made itself). A missing directory passes: whoever creates it next is this process."""
    try:
        info = os.stat(directory) if link else os.lstat(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ArtifactRootUnsafe(
            f"{what} {directory} cannot be checked: {exc.strerror or exc}",
            next_step="use an artifact root of your own (--artifacts DIR or SOCIETY_ARTIFACTS)",
        ) from exc
    problem = _problem(info)
    if problem is not None:
        raise ArtifactRootUnsafe(
            f"{what} {directory} {problem}: its runs' ledgers could be read or replaced by "
            "another local user, so nothing is read or written there",
            next_step=(
                "use an artifact root of your own (mkdir -m 700 DIR, then --artifacts DIR or "
                f"SOCIETY_ARTIFACTS=DIR), or make this one yours (chown {os.geteuid()} and "
                "chmod go-w)"
            ),
        )


def _problem(info: os.stat_result) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != os.geteuid():
        return f"is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    if info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and not _own_group(info)):
        return f"may be written by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _own_group(info: os.stat_result) -> bool:
    """A group-writable directory is still ours alone when its group is our own private group
    (``umask 002`` desktops make every directory so): our gid, and no other listed member."""
    if info.st_gid != os.getegid():
        return False
    try:
        members = set(grp.getgrgid(info.st_gid).gr_mem)
        me = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return False
    return members <= {me}
