"""Find Hermes roots, the profiles inside them, and who owns each (host side: may run as root).

A root holds the `default` profile (the root folder itself) and one folder per
named profile under `profiles/`. Discovery only lists folders, through
descriptors opened with O_NOFOLLOW and `lstat`s relative to them: it never
follows a symlink, never opens a file, never creates anything. Who owns a
profile is decided here, so that its work runs as that account (docs/design.md §10):

- a root belongs to the owner of its folder;
- a profile is worked on only when its home and every folder from the root down
  to it are real folders, owned by that owner, and not writable by other users;
- the folders above the root may not hand the path over from one user to another
  (systemd-tmpfiles' "unsafe path transition"), nor be writable by others unless
  sticky (like /tmp).
Anything else is skipped with the path and the reason; the other profiles go on.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
import struct
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from hermes_admin.model import Owner, Profile
from hermes_admin.trust import expand_user, home_folder

# Hermes' own rule for profile ids; `default` is the root and never a folder.
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# a folder opened only to list or lstat from: never through a link
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Skipped:
    """A folder that looks like it could be a profile but is not one, or may not be worked on."""

    path: Path
    reason: str
    refused: bool = False  # a profile left alone for safety (an error), not merely "not a profile"


@dataclass
class Discovery:
    profiles: list[Profile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    missing_roots: list[Path] = field(default_factory=list)
    owners: dict[Path, Owner] = field(default_factory=dict)  # home -> who works on it

    def absorb(self, other: "Discovery") -> None:
        self.profiles += other.profiles
        self.skipped += other.skipped
        self.missing_roots += other.missing_roots
        self.owners.update(other.owners)


def platform_default_root() -> Path:
    """Hermes' default home: `~/.hermes` (POSIX) or `%LOCALAPPDATA%\\hermes` (Windows)."""
    suffix = os.environ.get("HERMES_DATA_DIR_SUFFIX", "")
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA")
        local = Path(base) if base else Path.home() / "AppData" / "Local"
        return local / f"hermes{suffix}"
    return home_folder() / f".hermes{suffix}"  # root's own by the password database, never $HOME


def root_of_home(home: Path) -> Path:
    """Map a profile home back to its root: `<root>/profiles/<name>` -> `<root>`."""
    home = Path(expand_user(str(home)))
    if home.parent.name == "profiles" and home.name and not home.name.startswith("."):
        return home.parent.parent
    return home


def all_users_roots() -> list[Path]:
    """The default root of every local user that has one; a user without one is no error."""
    found = []
    for entry in pwd.getpwall():
        if not entry.pw_dir or not entry.pw_dir.startswith("/"):
            continue
        candidate = Path(entry.pw_dir) / ".hermes"
        if os.path.lexists(candidate):  # a link is listed too, to be refused with its reason
            found.append(candidate)
    return found


def absolute(path: Path) -> Path:
    """The path with its folders above resolved, its last component left as it is (a link stays a link)."""
    path = Path(os.path.normpath(Path(expand_user(str(path))).absolute()))  # no `..` spellings of one root
    return Path(os.path.realpath(path.parent)) / path.name if path.name else path


def resolve_roots(
    explicit: tuple[str, ...] | list[str] = (),
    config_roots: list[str] | None = None,
    all_users: bool = False,
    environ: dict[str, str] | None = None,
) -> list[Path]:
    """Which roots a command works on, in order, without duplicates.

    `--root` wins; else the admin config's `roots:`; else `HERMES_HOME`
    (mapped back to its root); else the platform default. `--all-users` adds
    every local user's default root.
    """
    env = os.environ if environ is None else environ
    if explicit:
        roots = [Path(expand_user(str(p))) for p in explicit]
    elif config_roots:
        roots = [Path(expand_user(str(p))) for p in config_roots]
    elif env.get("HERMES_HOME", "").strip():
        roots = [root_of_home(Path(env["HERMES_HOME"].strip()))]
    elif all_users:
        roots = []  # every user's root, root's own among them when it exists
    else:
        roots = [platform_default_root()]
    if all_users:
        roots += all_users_roots()
    unique: list[Path] = []
    for root in roots:
        key = absolute(root)
        if key not in unique:
            unique.append(key)
    return unique


# -- who may be worked on, and as whom ------------------------------------------------

@lru_cache(maxsize=None)
def _group_members(gid: int) -> frozenset[int]:
    """Every uid in a group: its listed members and the accounts whose primary group it is."""
    members = set()
    try:
        names = grp.getgrgid(gid).gr_mem
    except KeyError:
        names = []
    for name in names:
        try:
            members.add(pwd.getpwnam(name).pw_uid)
        except KeyError:
            pass
    members.update(p.pw_uid for p in pwd.getpwall() if p.pw_gid == gid)
    return frozenset(members)


def writable_by_others(st: os.stat_result, owner: int, acl: bytes | None = None) -> bool:
    """Can anyone but `owner` (and root) change this folder's entries (mode bits, and its POSIX ACL)?"""
    if st.st_mode & stat.S_IWOTH:
        return True
    if st.st_mode & stat.S_IWGRP and _group_members(st.st_gid) - {owner, 0}:
        return True
    return bool(acl) and _acl_lets_others_write(acl, owner)


# POSIX ACL entry tags (acl/libacl.h), read raw from system.posix_acl_access
_ACL_USER, _ACL_GROUP, _ACL_MASK = 0x02, 0x08, 0x10


def _acl_lets_others_write(acl: bytes, owner: int) -> bool:
    """A `system.posix_acl_access` value: does a named user or group entry (under the mask) grant write?"""
    entries = [struct.unpack_from("<HHI", acl, offset) for offset in range(4, len(acl) - 7, 8)]
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)
    for tag, perm, ident in entries:
        if perm & mask & 0o2:
            if tag == _ACL_USER and ident not in (owner, 0):
                return True
            if tag == _ACL_GROUP and _group_members(ident) - {owner, 0}:
                return True
    return False


def _acl(target, dir_fd: int | None = None) -> bytes | None:
    """The folder's access ACL, if it has one (an fd, or a name relative to `dir_fd`, never followed)."""
    try:
        if isinstance(target, int):
            return os.getxattr(target, "system.posix_acl_access")
        path = target if dir_fd is None else f"/proc/self/fd/{dir_fd}/{target}"
        return os.getxattr(path, "system.posix_acl_access", follow_symlinks=False)
    except OSError:
        return None


def _path_problem(folder: Path) -> str | None:
    """Why the path down to a root (the root included) is unsafe to work on, or None.

    Walking down from /: a folder writable by others (and not sticky) lets them swap what is
    below; a folder owned by one user that holds another's entry can swap that entry.
    """
    parts = folder.parts
    parent_st = None
    for n in range(1, len(parts) + 1):
        path = Path(*parts[:n])
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"{path}: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return f"{path} changed into a symlink"
        if parent_st is not None:
            if parent_st.st_uid not in (0, st.st_uid):
                return f"unsafe path transition: {path.parent} (uid {parent_st.st_uid}) holds {path} (uid {st.st_uid})"
            if writable_by_others(parent_st, parent_st.st_uid) and not parent_st.st_mode & stat.S_ISVTX:
                return f"{path.parent} is writable by other users"
        parent_st = st
    if parent_st is not None and writable_by_others(parent_st, parent_st.st_uid) \
            and not parent_st.st_mode & stat.S_ISVTX:
        return f"{folder} is writable by other users"
    return None


def owner_account(uid: int) -> Owner | None:
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return None
    try:
        groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid))))
    except OSError:
        groups = (entry.pw_gid,)
    return Owner(uid, entry.pw_gid, groups, entry.pw_name, entry.pw_dir)


def _open_dir(name, dir_fd: int | None = None) -> int:
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _refusal(path: Path, st: os.stat_result, owner: int, acl: bytes | None = None) -> str | None:
    """Why a folder of a root may not be worked on as `owner`, or None."""
    if st.st_uid != owner:
        return f"owned by uid {st.st_uid}, not by the root's owner (uid {owner})"
    if writable_by_others(st, owner, acl):
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def discover_root(root: Path) -> Discovery:
    """The profiles of one root: `default` plus every valid, live `profiles/<name>`, with their owner."""
    found = Discovery()
    root = absolute(root)
    try:
        root_fd = _open_dir(root)
    except FileNotFoundError:
        found.missing_roots.append(root)
        return found
    except OSError as exc:
        reason = "is a symlink (a root must be a real folder)" if os.path.islink(root) else (
            "not a folder" if os.path.lexists(root) else exc.strerror)
        found.skipped.append(Skipped(root, reason, refused=True))
        return found
    try:
        st = os.fstat(root_fd)
        owner_uid = st.st_uid
        # the walk includes the root itself: a folder of one user may hold only that user's root
        problem = _path_problem(root) or (
            f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o}, or its ACL)"
            if writable_by_others(st, owner_uid, _acl(root_fd)) else None)
        account = owner_account(owner_uid)
        if problem is None and account is None:
            problem = f"owned by uid {owner_uid}, which has no account"
        if problem is None and os.geteuid() not in (0, owner_uid):
            problem = f"belongs to {account.user}: only {account.user} or root can maintain it"
        if problem:
            found.skipped.append(Skipped(root, problem, refused=True))
            return found
        found.profiles.append(Profile(root=root, name="default", home=root))
        found.owners[root] = account
        _named_profiles(found, root, root_fd, account)
    finally:
        os.close(root_fd)
    return found


def _named_profiles(found: Discovery, root: Path, root_fd: int, owner: Owner) -> None:
    folder = root / "profiles"
    try:
        fd = _open_dir("profiles", dir_fd=root_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if os.path.islink(folder):
            found.skipped.append(Skipped(folder, "is a symlink: its profiles are not worked on", refused=True))
        elif exc.errno != 20:  # ENOTDIR: a file called `profiles` holds no profiles
            found.skipped.append(Skipped(folder, f"cannot list: {exc.strerror}", refused=True))
        return
    try:
        problem = _refusal(folder, os.fstat(fd), owner.uid, _acl(fd))
        if problem:
            found.skipped.append(Skipped(folder, f"{problem}: its profiles are not worked on", refused=True))
            return
        tombstones = _tombstones(fd)
        for name in sorted(os.listdir(fd)):
            path = folder / name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                if not name.startswith(".") and PROFILE_NAME.match(name):
                    found.skipped.append(Skipped(path, "is a symlink (a profile must be a real folder)", refused=True))
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            if name == ".deleted":
                found.skipped.append(Skipped(path, "tombstones of deleted profiles, not a profile"))
            elif name.startswith("."):
                found.skipped.append(Skipped(path, "hidden folder (staging or deleted profile)"))
            elif name == "default":
                found.skipped.append(Skipped(path, "'default' is the root itself, not a folder"))
            elif not PROFILE_NAME.match(name):
                found.skipped.append(Skipped(path, "not a valid profile name"))
            elif name in tombstones:
                found.skipped.append(Skipped(path, "profile is marked deleted"))
            elif (problem := _refusal(path, st, owner.uid, _acl(name, fd))) is not None:
                found.skipped.append(Skipped(path, problem, refused=True))
            else:
                found.profiles.append(Profile(root=root, name=name, home=path))
                found.owners[path] = owner
    except OSError as exc:
        found.skipped.append(Skipped(folder, f"cannot list: {exc.strerror}", refused=True))
    finally:
        os.close(fd)


def _tombstones(profiles_fd: int) -> set[str]:
    try:
        fd = _open_dir(".deleted", dir_fd=profiles_fd)
    except OSError:
        return set()
    try:
        return set(os.listdir(fd))
    finally:
        os.close(fd)


def discover(roots: list[Path], only: tuple[str, ...] | list[str] = ()) -> Discovery:
    """Profiles of every root; `only` restricts to those names (all roots)."""
    _group_members.cache_clear()  # groups change: a long-lived daemon looks afresh at every run
    total = Discovery()
    for root in roots:
        part = discover_root(root)
        if only:
            part.profiles = [p for p in part.profiles if p.name in only]
            part.owners = {p.home: part.owners[p.home] for p in part.profiles}
        total.absorb(part)
    return total
