"""Root over hostile homes: each test plays one attack a local user can prepare in her own home,
then runs hermes-admin AS ROOT over it and checks what must hold whatever the tool does:

- nothing outside her reach is deleted, created, chmodded or chowned;
- no other user's store is read or changed;
- none of her code runs with root's uid, groups, environment or descriptors;
- her home afterwards holds no root-owned file.

The test process itself never opens a user's SQLite file in place (a read-only open of a WAL
store creates root-owned -wal/-shm files): stores are read from a private copy (`rows`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import tempfile
import termios
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import store_digest
from tests.helpers import expected_after_run, row_ids
from tests.root.conftest import build_user_root, chown_tree, root_owned

DAY = 86400.0
STANDARD = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}
CLEAN_ENV = {"HOME", "USER", "LOGNAME", "PATH", "LANG", "HERMES_HOME", "PYTHONUNBUFFERED"}


# -- fixtures and helpers -----------------------------------------------------------------

@pytest.fixture
def admin(admin):
    """The tier's `admin`, echoing each command and what it said (shown with -rA or on failure)."""
    def run(*args, **kwargs):
        done = admin(*args, **kwargs)
        who = kwargs["as_user"].name if kwargs.get("as_user") else "root"
        print(f"$ ({who}) hermes-admin {' '.join(args)}\n{explain(done)}")
        return done
    return run


@pytest.fixture
def victim():
    """A root-only folder (0700, root's) in /var/tmp, for files nobody but root may touch."""
    made = []

    def make(mode_bits: int = 0o700) -> Path:
        path = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ha-victim-"))
        os.chmod(path, mode_bits)
        made.append(path)
        return path

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def markers():
    """A sticky world-writable folder where planted code of any uid drops one new file per note."""
    path = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ha-markers-"))
    os.chmod(path, 0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def notes(folder: Path, label: str | None = None) -> list[dict]:
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = {"unparsable": str(path), "uid": os.lstat(path).st_uid}
        record.setdefault("file_uid", os.lstat(path).st_uid)
        if label is None or record.get("label") == label:
            found.append(record)
    return found


def tree_state(top: Path) -> dict[str, tuple]:
    """Every entry below `top` (and `top` itself), by lstat: kind, mode, owner, size, mtime, content."""
    state = {}

    def one(path: str) -> None:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                what = hashlib.sha256(f.read()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            what = os.readlink(path)
        else:
            what = None
        state[os.path.relpath(path, top)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid,
                                             st.st_gid, st.st_size if not stat.S_ISDIR(st.st_mode) else None,
                                             st.st_mtime_ns if not stat.S_ISDIR(st.st_mode) else None, what)

    one(str(top))
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            one(os.path.join(folder, name))
    return state


def rows(db: Path, sql: str = "SELECT id FROM sessions") -> set[str]:
    """Row ids of a store, read from a private copy (never opened in place: see the module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in ("", "-wal"):
            source = Path(f"{db}{suffix}")
            if os.path.lexists(source) and not source.is_symlink():
                shutil.copyfile(source, Path(tmp) / f"state.db{suffix}")
        return row_ids(Path(tmp) / "state.db", sql)


def assert_maintained(home: Path, kinds: dict, what: str) -> None:
    want = expected_after_run(kinds)
    ids = rows(home / "state.db")
    assert not ids & want["gone"], f"{what}: the retention purge did not run on {home}"
    assert want["kept"] <= ids, f"{what}: sessions that must stay are gone from {home}"


def set_config(home: Path, policy: dict | None = None, plugins: list[str] | None = None) -> None:
    path = home / "config.yaml"
    config = (yaml.safe_load(path.read_text()) if path.exists() else None) or {}
    if policy is not None:
        config["sessions"] = policy
    if plugins is not None:
        config["plugins"] = {"enabled": list(plugins)}
    path.write_text(yaml.safe_dump(config))


RECORDER = r'''
import json, os, sys, time
MARKERS = @MARKERS@
LABEL = @LABEL@


def _note(event, **extra):
    try:
        fds = {}
        for name in os.listdir("/proc/self/fd"):
            try:
                fds[name] = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                pass
        ttys = []
        for name in fds:
            try:
                if os.isatty(int(name)):
                    ttys.append(int(name))
            except OSError:
                pass
        try:
            os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
            dev_tty = True
        except OSError:
            dev_tty = False
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        record = dict(label=LABEL, event=event, pid=os.getpid(), uid=os.getuid(), euid=os.geteuid(),
                      gid=os.getgid(), egid=os.getegid(), groups=sorted(os.getgroups()), env=dict(os.environ),
                      fds=fds, ttys=ttys, dev_tty=dev_tty, session=int(fields[3]), tty_nr=int(fields[4]),
                      cwd=os.getcwd(), sys_path=list(sys.path), **extra)
        path = os.path.join(MARKERS, f"{LABEL}-{event}-{os.getpid()}-{time.monotonic_ns()}.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)
    except Exception as exc:  # evidence is best effort; never fail the host's run because of it
        print(f"recorder {LABEL}: {exc!r}", file=sys.stderr)


_note("import")


def register(ctx):
    _note("register")

    def on_delete(session_id, **kwargs):
        _note("delete", session_id=session_id)

    ctx.register_hook("on_session_delete", on_delete)
'''


def recorder_source(markers: Path, label: str) -> str:
    return RECORDER.replace("@MARKERS@", repr(str(markers))).replace("@LABEL@", repr(label))


def plant_plugin(home: Path, name: str, source: str) -> None:
    folder = home / "plugins" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.yaml").write_text(f"name: {name}\n")
    (folder / "__init__.py").write_text(source)


def assert_hers(record: dict, user) -> None:
    """A note taken by planted code: it ran as her, with her groups, never with root's."""
    assert (record["uid"], record["euid"]) == (user.uid, user.uid), record
    assert (record["gid"], record["egid"]) == (user.gid, user.gid), record
    assert 0 not in record["groups"], record
    assert set(record["groups"]) <= set(os.getgrouplist(user.name, user.gid)), record


def assert_never_root(records: list[dict]) -> None:
    for record in records:
        assert record.get("uid") != 0 and record.get("euid", 1) != 0 and record["file_uid"] != 0, \
            f"planted code ran as root: {record}"


def prepare(user, profiles=None, policy=STANDARD, now=None) -> dict:
    """Her root from the scenario, the policy in every profile's config.yaml, all hers."""
    kinds = build_user_root(user, profiles or {"default": 30, "work": 30}, now=now)
    for name in kinds:
        set_config(user.root if name == "default" else user.root / "profiles" / name, policy=policy)
    chown_tree(user.root, user)
    return kinds


def explain(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n--- stderr ---\n{done.stderr[-6000:]}\n--- stdout ---\n{done.stdout[-2000:]}"


# -- 1 --------------------------------------------------------------------------------------

def test_01_sessions_folder_is_a_link_to_roots_folder(make_user, admin, victim):
    """Attack: her `sessions/` is a symlink to a root-owned folder holding files named like the
    per-session files the retention purge and the orphan-file sweep delete; root runs `run`."""
    alice = make_user("alice")
    kinds = prepare(alice)
    now = time.time()
    targets = {"default": victim(0o700), "work": victim(0o755)}  # unreadable, and readable by her
    for name, target in targets.items():
        home = alice.root if name == "default" else alice.root / "profiles" / name
        k = kinds[name]
        for source in (home / "sessions").iterdir():
            shutil.copy2(source, target / source.name)  # her real files, as root's
        doomed = sorted(expected_after_run(k)["gone"] | set(k["orphan_file_old"]) | set(k["orphan_rows"]))
        for sid in doomed:
            for form in (f"{sid}.json", f"{sid}.jsonl", f"session_{sid}.json",
                         f"request_dump_{sid}_20250101_000000_000123.json"):
                (target / form).write_text('{"root": "precious"}\n')
        for entry in target.iterdir():
            os.chmod(entry, 0o600)
            os.utime(entry, (now - 30 * DAY, now - 30 * DAY))
        shutil.rmtree(home / "sessions")
        os.symlink(target, home / "sessions")
        os.lchown(home / "sessions", alice.uid, alice.gid)
    before = {name: tree_state(target) for name, target in targets.items()}

    done = admin("--root", str(alice.root), "run")

    for name, target in targets.items():
        assert tree_state(target) == before[name], f"root's folder behind {name}/sessions changed\n{explain(done)}"
    assert root_owned(alice.home) == [], explain(done)


# -- 2 --------------------------------------------------------------------------------------

def test_02a_state_db_is_a_link_to_bobs_store(make_user, admin):
    """Attack: her default profile's `state.db` is a symlink to bob's store; root runs `run`,
    `purge --older-than 1 --force` and `archive-inactive --days 1 --force` over her root."""
    alice, bob = make_user("alice"), make_user("bob")
    kinds = prepare(alice)
    prepare(bob, {"default": 30}, now=time.time() - 7200)  # other ids than hers
    bob_ids = rows(bob.root / "state.db")
    bob_archived = rows(bob.root / "state.db", "SELECT id FROM sessions WHERE archived = 1")
    (alice.root / "state.db").unlink()
    os.symlink(bob.root / "state.db", alice.root / "state.db")
    os.lchown(alice.root / "state.db", alice.uid, alice.gid)
    bob_store, bob_tree = store_digest(bob.root), tree_state(bob.home)

    runs = [admin("--root", str(alice.root), "run"),
            admin("--root", str(alice.root), "purge", "--older-than", "1", "--force", "--yes"),
            admin("--root", str(alice.root), "archive-inactive", "--days", "1", "--force", "--yes")]

    everything = "\n".join(explain(d) for d in runs)
    assert store_digest(bob.root) == bob_store, f"bob's store or WAL changed\n{everything}"
    assert tree_state(bob.home) == bob_tree, f"something in bob's home changed\n{everything}"
    assert rows(bob.root / "state.db") == bob_ids
    assert rows(bob.root / "state.db", "SELECT id FROM sessions WHERE archived = 1") == bob_archived
    assert root_owned(alice.home) == [], everything
    # Her other profile was still worked on (the first run's policy purge left its kept rows).
    ids = rows(alice.root / "profiles" / "work" / "state.db")
    assert not ids & expected_after_run(kinds["work"])["gone"], everything


def test_02b_named_profile_is_a_link_to_bobs_root(make_user, admin):
    """Attack: `profiles/x` in her root is a symlink to bob's root; root runs `run` over her root."""
    alice, bob = make_user("alice"), make_user("bob")
    kinds = prepare(alice)
    prepare(bob, {"default": 30}, now=time.time() - 7200)
    bob_ids = rows(bob.root / "state.db")
    link = alice.root / "profiles" / "x"
    os.symlink(bob.root, link)
    os.lchown(link, alice.uid, alice.gid)
    bob_store, bob_tree = store_digest(bob.root), tree_state(bob.home)

    done = admin("--root", str(alice.root), "run")

    assert done.returncode == 2, explain(done)
    assert any(str(link) in line and "error" in line for line in done.stderr.splitlines()), explain(done)
    assert store_digest(bob.root) == bob_store, explain(done)
    assert tree_state(bob.home) == bob_tree, explain(done)
    assert rows(bob.root / "state.db") == bob_ids
    assert_maintained(alice.root, kinds["default"], "default")
    assert_maintained(alice.root / "profiles" / "work", kinds["work"], "work")
    assert root_owned(alice.home) == [], explain(done)


# -- 3 --------------------------------------------------------------------------------------

def test_03_repair_apply_with_a_profile_linked_to_bobs_root(make_user, admin):
    """Attack: `profiles/x` is a symlink to bob's root, and her default store holds a session keyed
    to profile `x` (a move target); root runs `repair --apply --yes`: bob's rows are never moved
    into her store and nothing of hers is written into his."""
    alice, bob = make_user("alice"), make_user("bob")
    kinds = prepare(alice)
    prepare(bob, {"default": 30}, now=time.time() - 7200)
    mine = kinds["default"]["recent"][0]
    conn = sqlite3.connect(alice.root / "state.db")
    conn.execute("UPDATE sessions SET session_key = 'agent:x:telegram:dm:9' WHERE id = ?", (mine,))
    conn.commit()
    conn.close()
    chown_tree(alice.root, alice)
    link = alice.root / "profiles" / "x"
    os.symlink(bob.root, link)
    os.lchown(link, alice.uid, alice.gid)
    bob_ids = rows(bob.root / "state.db")
    hers_before = rows(alice.root / "state.db")
    bob_store, bob_tree = store_digest(bob.root), tree_state(bob.home)

    done = admin("--root", str(alice.root), "repair", "--apply", "--yes")

    assert store_digest(bob.root) == bob_store, f"bob's store changed\n{explain(done)}"
    assert tree_state(bob.home) == bob_tree, explain(done)
    assert rows(bob.root / "state.db") == bob_ids
    hers = rows(alice.root / "state.db")
    assert not hers & bob_ids, f"bob's sessions moved into her store\n{explain(done)}"
    assert mine in hers, f"her session keyed to 'x' left her store\n{explain(done)}"
    assert hers <= hers_before, f"rows appeared in her store\n{explain(done)}"
    assert any(str(link) in line for line in done.stderr.splitlines()), explain(done)
    assert root_owned(alice.home) == [], explain(done)


# -- 4 --------------------------------------------------------------------------------------

def _root_owned_home(victim, alice, markers: Path, label: str, mode_bits: int) -> Path:
    """A root-owned, world-writable folder holding a store (root's), with her config and plugin in it."""
    from hermes_admin.synth.scenario import build_root

    folder = victim(0o700)
    build_root(folder, {"default": 30}, now=time.time())
    set_config(folder, policy=STANDARD, plugins=["rec"])
    plant_plugin(folder, "rec", recorder_source(markers, label))
    for entry in (folder / "config.yaml", folder / "plugins"):
        chown_tree(entry, alice)  # what she put there herself
    os.chmod(folder, mode_bits)
    return folder


@pytest.mark.parametrize("mode_bits", [0o1777, 0o777], ids=["1777", "0777"])
def test_04a_profile_linked_to_a_world_writable_root_folder(make_user, admin, victim, markers, mode_bits):
    """Attack: `profiles/tmpx` is a symlink to a root-owned world-writable folder in /var/tmp where
    she planted a config and a plugin; root runs `run`: refused, her plugin never runs as root."""
    alice = make_user("alice")
    kinds = prepare(alice, {"default": 30})
    set_config(alice.root, plugins=["rec"])
    plant_plugin(alice.root, "rec", recorder_source(markers, "own"))
    chown_tree(alice.root, alice)
    target = _root_owned_home(victim, alice, markers, "tmpx", mode_bits)
    link = alice.root / "profiles" / "tmpx"
    link.parent.mkdir(exist_ok=True)
    os.symlink(target, link)
    chown_tree(alice.root / "profiles", alice)
    before = tree_state(target)

    done = admin("--root", str(alice.root), "run")

    assert done.returncode == 2, explain(done)
    assert any(str(link) in line and "error" in line for line in done.stderr.splitlines()), explain(done)
    assert tree_state(target) == before, f"root's folder behind profiles/tmpx changed\n{explain(done)}"
    assert notes(markers, "tmpx") == [], f"her plugin in the refused folder ran\n{explain(done)}"
    assert_never_root(notes(markers))
    own = [n for n in notes(markers, "own") if n["event"] == "delete"]
    assert own, "control: her plugin in her own default profile ran"
    for record in own:
        assert_hers(record, alice)
    assert_maintained(alice.root, kinds["default"], "default")
    assert root_owned(alice.home) == [], explain(done)


@pytest.mark.parametrize("mode_bits", [0o777, 0o1777], ids=["0777", "1777"])
def test_04b_root_option_at_a_world_writable_root_folder(make_user, admin, victim, markers, mode_bits):
    """Attack: `--root` names a root-owned world-writable folder holding a state.db and her
    plugins/ (say, a shared drop folder an admin configured); root runs `run`: refused, no plugin as root."""
    alice = make_user("alice")
    folder = _root_owned_home(victim, alice, markers, "shared", mode_bits)
    digest, before = store_digest(folder), tree_state(folder)

    done = admin("--root", str(folder), "run")

    assert done.returncode == 2, explain(done)
    assert any(str(folder) in line and "error" in line for line in done.stderr.splitlines()), explain(done)
    assert store_digest(folder) == digest, explain(done)
    assert tree_state(folder) == before, f"the refused folder changed\n{explain(done)}"
    assert_never_root(notes(markers))
    assert notes(markers) == [], f"a plugin of the refused folder ran\n{explain(done)}"


# -- 5 --------------------------------------------------------------------------------------

CJK_SO = r'''
#include <stdio.h>
#include <unistd.h>
#include <time.h>
__attribute__((constructor)) static void planted(void) {
    char path[512];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(path, sizeof path, "@MARKERS@/cjk-%d-%ld%09ld.txt", (int)getpid(), (long)ts.tv_sec, ts.tv_nsec);
    FILE *f = fopen(path, "wx");
    if (f) { fprintf(f, "%d %d\n", (int)getuid(), (int)geteuid()); fclose(f); }
}
int sqlite3_ftscjk_init(void *db, char **err, const void *api) { return 0; }
int sqlite3_extension_init(void *db, char **err, const void *api) { return 0; }
'''


def test_05_planted_cjk_tokenizer_library(make_user, admin, markers, tmp_path):
    """Attack: her store has CJK FTS triggers, so deleting loads `<home>/lib/libfts5_cjk.so`,
    which she compiled with a constructor that notes getuid(); root runs `run`: never as uid 0."""
    if shutil.which("gcc") is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "gcc"], capture_output=True, check=False)
    assert shutil.which("gcc"), "gcc is needed to build the planted library (apt-get install gcc)"
    alice = make_user("alice")
    kinds = prepare(alice)
    source = tmp_path / "cjk.c"
    source.write_text(CJK_SO.replace("@MARKERS@", str(markers)))
    for home in (alice.root, alice.root / "profiles" / "work"):
        conn = sqlite3.connect(home / "state.db")
        conn.execute("CREATE TRIGGER messages_fts_cjk_delete AFTER DELETE ON messages BEGIN SELECT 1; END")
        conn.commit()
        conn.close()
        (home / "lib").mkdir(exist_ok=True)
        built = subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(home / "lib" / "libfts5_cjk.so"), str(source)],
                               capture_output=True, text=True)
        assert built.returncode == 0, built.stderr
    chown_tree(alice.root, alice)

    done = admin("--root", str(alice.root), "run")

    loads = []
    for path in sorted(markers.glob("cjk-*.txt")):
        uid, euid = (int(x) for x in path.read_text().split())
        loads.append((uid, euid, os.lstat(path).st_uid))
    assert all(0 not in load for load in loads), f"the planted library ran as root: {loads}\n{explain(done)}"
    assert all(load == (alice.uid,) * 3 for load in loads), loads
    print(f"planted libfts5_cjk.so loaded {len(loads)} time(s), as uid(s) {sorted({l[0] for l in loads})}")
    assert root_owned(alice.home) == [], explain(done)
    if loads:  # it loaded: it was loaded as her, and the deletes went on
        assert_maintained(alice.root / "profiles" / "work", kinds["work"], "work")


# -- 6 --------------------------------------------------------------------------------------

def test_06_lock_and_outbox_links_into_a_root_only_folder(make_user, admin, victim):
    """Attack: `.hermes-admin/lock`, `.hermes-admin/outbox.db` and `state.db.auto-maintenance.lock`
    are symlinks to missing paths inside a root-only folder (one per profile); root runs `run`:
    nothing is created there, no traceback, the clean profile is maintained."""
    alice = make_user("alice")
    kinds = prepare(alice, {"default": 30, "outbox": 30, "amlock": 30, "work": 30})
    target = victim(0o700)
    homes = {name: alice.root if name == "default" else alice.root / "profiles" / name for name in kinds}
    links = {
        homes["default"] / ".hermes-admin" / "lock": target / "lock",
        homes["outbox"] / ".hermes-admin" / "outbox.db": target / "outbox.db",
        homes["amlock"] / "state.db.auto-maintenance.lock": target / "state.db.auto-maintenance.lock",
    }
    for link, dest in links.items():
        link.parent.mkdir(mode=0o700, exist_ok=True)
        os.symlink(dest, link)
    chown_tree(alice.root, alice)
    before = tree_state(target)

    done = admin("--root", str(alice.root), "run")

    assert tree_state(target) == before, f"something was created in the root-only folder\n{explain(done)}"
    assert os.listdir(target) == [], explain(done)
    assert "Traceback" not in done.stderr, explain(done)
    assert done.returncode in (0, 1, 2), explain(done)
    assert_maintained(homes["work"], kinds["work"], "work")
    assert root_owned(alice.home) == [], explain(done)


# -- 7 --------------------------------------------------------------------------------------

PLANTED_PACKAGE = r'''
import os, time
try:
    path = os.path.join(@MARKERS@, f"pkg-@WHERE@-{os.getpid()}-{time.monotonic_ns()}.json")
    with open(path, "x") as out:
        out.write('{"label": "pkg", "where": "@WHERE@", "uid": %d, "euid": %d}' % (os.getuid(), os.geteuid()))
except Exception:
    pass
'''


def test_07_planted_package_in_the_current_folder(make_user, admin, markers):
    """Attack: a `hermes_admin/` package (and sitecustomize/usercustomize, a .pth) planted in her
    home; root runs the tool with its current folder in her root: the planted code never runs as root."""
    alice = make_user("alice")
    kinds = prepare(alice, {"default": 30})
    set_config(alice.root, plugins=["rec"])
    plant_plugin(alice.root, "rec", recorder_source(markers, "rec"))
    site = alice.home / ".local" / "lib" / "python3.11" / "site-packages"
    for folder, where in ((alice.home, "home"), (alice.root, "root"), (alice.root / "plugins", "plugins"),
                          (site, "usersite")):
        code = PLANTED_PACKAGE.replace("@MARKERS@", repr(str(markers))).replace("@WHERE@", where)
        (folder / "hermes_admin").mkdir(parents=True, exist_ok=True)
        (folder / "hermes_admin" / "__init__.py").write_text(code)
        (folder / "sitecustomize.py").write_text(code)
        (folder / "usercustomize.py").write_text(code)
    (site / "planted.pth").write_text("import sitecustomize\n")
    chown_tree(alice.home, alice)

    done = admin("--root", str(alice.root), "run", cwd=alice.root)
    listed = admin("--root", str(alice.root), "sessions", "list", cwd=alice.home)
    assert "Traceback" not in listed.stderr, explain(listed)

    planted = [n for n in notes(markers) if n.get("label") == "pkg"]
    assert_never_root(planted)
    assert planted == [], f"planted code ran (as uid {sorted({n['uid'] for n in planted})})\n{explain(done)}"
    assert [n for n in notes(markers, "rec") if n["event"] == "delete"], "control: her plugin ran"
    assert_maintained(alice.root, kinds["default"], "default")
    assert root_owned(alice.home) == [], explain(done)


# -- 8 --------------------------------------------------------------------------------------

DOUBLE_FORK = r'''
import json, os, select, sys, time
MARKERS = @MARKERS@
_forked = []


def _escape():
    os.setsid()
    if os.fork():
        os._exit(0)
    _report("escaped-start", {})
    time.sleep(3)
    read = {}
    for fd in (0, 1, 2):
        try:
            ready, _, _ = select.select([fd], [], [], 0)
            read[str(fd)] = os.read(fd, 65536).decode("utf-8", "replace") if ready else "(nothing to read)"
        except Exception as exc:
            read[str(fd)] = f"{type(exc).__name__}: {exc}"
    _report("escaped", read)


def _report(label, read):
    """A note of the escaped process: who it is, what it holds, what it read."""
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass
    ttys = [int(n) for n in fds if os.path.exists(f"/proc/self/fd/{n}") and os.isatty(int(n))]
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    record = dict(label=label, event=label, pid=os.getpid(), uid=os.getuid(), euid=os.geteuid(), gid=os.getgid(),
                  egid=os.getegid(), groups=sorted(os.getgroups()), env=dict(os.environ), read=read,
                  fds=fds, ttys=ttys, tty_nr=int(fields[4]))
    fd = os.open(os.path.join(MARKERS, f"{label}-{os.getpid()}.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)


def register(ctx):
    def on_delete(session_id, **kwargs):
        if _forked:
            return
        _forked.append(1)
        pid = os.fork()
        if pid:
            os.waitpid(pid, 0)
            return
        try:
            _escape()
        except BaseException as exc:
            try:
                with open(os.path.join(MARKERS, f"escape-failed-{os.getpid()}.txt"), "x") as out:
                    out.write(f"{os.getuid()} {type(exc).__name__}: {exc}")
            except BaseException:
                pass
        finally:
            os._exit(0)

    ctx.register_hook("on_session_delete", on_delete)
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _run_on_a_terminal(exe: Path, args: list[str], env: dict, leak_fd: int) -> subprocess.CompletedProcess:
    """hermes-admin as root with a controlling terminal on stdin and an extra descriptor of root's."""
    master, slave = os.openpty()

    def on_the_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = subprocess.Popen([str(exe), *args], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd="/", pass_fds=(leak_fd,), preexec_fn=on_the_terminal, text=True)
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    finally:
        os.close(slave)
        os.close(master)


def test_08_plugin_gets_nothing_of_roots(make_user, admin, markers, victim, system_venv):
    """Attack: her plugins look for what root's process would hand them: a secret in root's
    environment, root's terminal, root's open descriptors, root's ids; one double-forks, setsid()s
    and outlives the run to read fds 0/1/2 later. All must be hers, nothing root's."""
    alice = make_user("alice")
    kinds = prepare(alice)
    for home in (alice.root, alice.root / "profiles" / "work"):
        set_config(home, plugins=["rec", "escape"])
        plant_plugin(home, "rec", recorder_source(markers, "rec"))
        plant_plugin(home, "escape", DOUBLE_FORK.replace("@MARKERS@", repr(str(markers))))
    chown_tree(alice.root, alice)
    secret_file = victim(0o700) / "root-secret"
    secret_file.write_text("root's secret\n")
    os.chmod(secret_file, 0o600)

    plain = admin("--root", str(alice.root), "run", "-p", "default", "--yes", env={"SECRET_TOKEN": "xyz"})
    leak = os.open(secret_file, os.O_RDONLY)
    try:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HERMES_ADMIN_CONFIG": "",
               "HOME": "/root", "SECRET_TOKEN": "xyz"}
        on_tty = _run_on_a_terminal(system_venv / "bin" / "hermes-admin",
                                    ["--root", str(alice.root), "run", "-p", "work", "--yes"], env, leak)
    finally:
        os.close(leak)
    deadline = time.monotonic() + 6  # an escaped process that outlived the run notes again after 3 s
    while time.monotonic() < deadline and any(_alive(n["pid"]) for n in notes(markers, "escaped-start")):
        time.sleep(0.2)
    both = explain(plain) + "\n" + explain(on_tty)

    records = notes(markers)
    assert_never_root(records)
    calls = [r for r in records if r.get("label") == "rec" and r["event"] == "delete"]
    assert {c["env"]["HERMES_HOME"] for c in calls} == {str(alice.root), str(alice.root / "profiles" / "work")}, both
    for record in records:
        assert_hers(record, alice)
        assert "SECRET_TOKEN" not in record["env"], record["env"]
        assert not any("xyz" in value for value in record["env"].values()), record["env"]
        assert set(record["env"]) <= CLEAN_ENV, record["env"]
        assert record["env"].get("HOME") == str(alice.home), record["env"]
        assert record["ttys"] == [], record
        assert not any(str(secret_file) in target or "/dev/pts" in target or target == "/dev/tty"
                       for target in record["fds"].values()), record["fds"]
        assert record["tty_nr"] == 0, record
        if "dev_tty" in record:
            assert record["dev_tty"] is False, record
    started, escaped = notes(markers, "escaped-start"), notes(markers, "escaped")
    failed = {p.name: p.read_text() for p in markers.glob("escape-failed-*.txt")}
    assert len(started) == 2, f"the double-forked plugin did not get away (one per run): {failed}\n{both}"
    for record in escaped:  # it outlived the run (the tool may also kill it: then there is no such note)
        assert not any("xyz" in text or "secret" in text for text in record["read"].values()), record["read"]
    print(f"double-forked plugin processes: {len(started)} escaped, {len(escaped)} outlived the run by 3 s")
    assert_maintained(alice.root, kinds["default"], "default")
    assert_maintained(alice.root / "profiles" / "work", kinds["work"], "work")
    assert root_owned(alice.home) == [], both


# -- 9 --------------------------------------------------------------------------------------

def _leftovers(alice) -> list[Path]:
    """What an older root-run hermes-admin left in her default profile's home, all root's."""
    home = alice.root
    state = home / ".hermes-admin"
    state.mkdir(mode=0o700)
    os.chmod(state, 0o700)
    (state / "lock").touch(mode=0o600)
    conn = sqlite3.connect(state / "outbox.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, created REAL NOT NULL, "
                 "state TEXT NOT NULL, kind TEXT NOT NULL, session_id TEXT NOT NULL, reason TEXT NOT NULL, "
                 "ids TEXT NOT NULL)")
    conn.close()
    lock = home / "state.db.auto-maintenance.lock"
    lock.touch(mode=0o600)
    os.chmod(lock, 0o600)
    snapshots = home / "state-snapshots"
    snapshots.mkdir(mode=0o700)
    os.chmod(snapshots, 0o700)
    (snapshots / "state.db.20250101T000000.bak").write_bytes(b"SQLite format 3\0")
    os.chmod(snapshots / "state.db.20250101T000000.bak", 0o600)
    made = [state, state / "lock", state / "outbox.db", lock, snapshots, snapshots / "state.db.20250101T000000.bak"]
    assert all(os.lstat(p).st_uid == 0 for p in made)
    return made


def test_09a_her_own_run_over_roots_leftovers(make_user, admin):
    """Attack surface: leftovers of an older root-run version (root-owned `.hermes-admin/` with its
    lock and outbox, `state.db.auto-maintenance.lock`, `state-snapshots/`); she runs `run` herself."""
    alice = make_user("alice")
    prepare(alice)
    _leftovers(alice)

    done = admin("--root", str(alice.root), "run", as_user=alice)

    assert done.returncode in (0, 1), explain(done)
    assert "Traceback" not in done.stderr, explain(done)
    assert "PermissionError" not in done.stderr, explain(done)


def test_09b_root_run_over_roots_leftovers(make_user, admin, victim):
    """Attack: the same leftovers, plus entries with the leftovers' names that she planted to get
    root's files chowned to her (symlinks to root's folder and file, a hard link to root's file);
    root runs `run`: her home holds no root-owned file afterwards, nothing of root's outside changes."""
    alice = make_user("alice")
    kinds = prepare(alice)
    made = _leftovers(alice)
    outside = victim(0o755)
    (outside / "precious").write_text("root's\n")
    os.chmod(outside / "precious", 0o644)
    (outside / "inner").mkdir(mode=0o700)
    for name, dest in (("state-snapshots.set-aside-1", outside / "inner"),
                       (".hermes-admin.set-aside-2", outside),
                       ("state.db.planted.lock", outside / "precious")):
        os.symlink(dest, alice.root / name)
        os.lchown(alice.root / name, alice.uid, alice.gid)
    try:  # where protected_hardlinks is off, she can link root's file into her home
        os.link(outside / "precious", alice.root / "state.db.hard.lock")
        hardlinked = alice.root / "state.db.hard.lock"
    except OSError:
        hardlinked = None
    before = tree_state(outside)

    done = admin("--root", str(alice.root), "run")

    assert tree_state(outside) == before, f"root's files behind her links changed\n{explain(done)}"
    assert_maintained(alice.root, kinds["default"], "default")
    left = [p for p in root_owned(alice.root) if hardlinked is None or p != str(hardlinked)]
    if left:  # not handed back: each must at least be reported
        unreported = [p for p in left if p not in done.stderr and p not in done.stdout]
        assert not unreported, f"root-owned files left in her home, unreported: {unreported}\n{explain(done)}"
        print(f"REPORTED ONLY (not handed back): {left}")
    else:
        print(f"handed back: {[str(p) for p in made]}")


# -- 10 -------------------------------------------------------------------------------------

def test_10_all_users_run_with_only_ordinary_roots(make_user, admin):
    """`--all-users run` as root, where root has no ~/.hermes and the only user roots are
    ordinary ones (a user's Hermes root with a plain store): exit code 0."""
    assert not os.path.lexists("/root/.hermes"), "this host's root has a ~/.hermes: the test assumes none"
    from hermes_admin.synth.builder import SynthStore, write_session_files

    alice, bob = make_user("alice"), make_user("bob")
    now = time.time()
    for user in (alice, bob):
        store = SynthStore(user.root / "state.db", version=30, profile="default")
        for n in range(3):
            sid = f"20260101_00000{n}_{user.name[-6:]}"
            store.session(sid, started=now - (n + 1) * DAY, ended=now - (n + 1) * DAY + 600, end_reason="user_exit",
                          title=f"chat {n}")
            store.messages(sid, 2, now - (n + 1) * DAY)
            write_session_files(user.root / "sessions", sid, ("jsonl",), mtime=now - (n + 1) * DAY)
        store.close()
        (user.root / "config.yaml").write_text("model:\n  default: synth/model-1\n")
        for folder in ("logs", "memories", "skills", "cron"):
            (user.root / folder).mkdir(exist_ok=True)
        chown_tree(user.root, user)
        os.chmod(user.root, 0o700)
        os.chmod(user.root / "state.db", 0o600)

    done = admin("--all-users", "run")

    assert done.returncode == 0, explain(done)
    for user in (alice, bob):
        assert root_owned(user.home) == [], explain(done)


# -- 11 -------------------------------------------------------------------------------------

def test_11_sessions_delete_with_session_files_linked_to_roots_files(make_user, admin, victim):
    """Attack: the session files of one of her sessions (`<id>.json`, `session_<id>.json`, a request
    dump) are symlinks to root-owned files (in a root-only folder, and in one she can read); root runs
    `sessions delete <id> --yes`: root's files still exist, unchanged."""
    alice = make_user("alice")
    kinds = prepare(alice, {"default": 30})
    sid = kinds["default"]["recent"][0]
    hidden, visible = victim(0o700), victim(0o755)
    sessions = alice.root / "sessions"
    plan = {f"{sid}.json": hidden / "victim.json",
            f"session_{sid}.json": visible / "victim-snapshot.json",
            f"request_dump_{sid}_20250101_000000_000123.json": visible / "victim-dump.json"}
    for name, dest in plan.items():
        dest.write_text("root's precious file\n")
        os.chmod(dest, 0o644)
        if os.path.lexists(sessions / name):
            (sessions / name).unlink()
        os.symlink(dest, sessions / name)
        os.lchown(sessions / name, alice.uid, alice.gid)
    before = {str(p): tree_state(p) for p in (hidden, visible)}

    done = admin("--root", str(alice.root), "sessions", "delete", sid, "--yes")

    for dest in plan.values():
        assert dest.exists() and dest.read_text() == "root's precious file\n", f"{dest} is gone\n{explain(done)}"
    assert {str(p): tree_state(p) for p in (hidden, visible)} == before, explain(done)
    assert root_owned(alice.home) == [], explain(done)


# -- 12 -------------------------------------------------------------------------------------

def test_12_daemon_as_root_runs_her_plugin_as_her(make_user, markers, system_venv, tmp_path):
    """The daemon as root over her root (schedule: run every second): her plugin runs as her, the
    daemon stops within 15 s of SIGTERM, and her home holds nothing of root's."""
    alice = make_user("alice")
    prepare(alice, {"default": 30})
    set_config(alice.root, plugins=["rec"])
    plant_plugin(alice.root, "rec", recorder_source(markers, "rec"))
    chown_tree(alice.root, alice)
    config = tmp_path / "admin.yaml"
    config.write_text(yaml.safe_dump({"schedule": {"run": {"every_seconds": 1}}}))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HERMES_ADMIN_CONFIG": "", "HOME": "/root",
           "SECRET_TOKEN": "xyz"}
    out, err = open(tmp_path / "daemon.out", "w+"), open(tmp_path / "daemon.err", "w+")
    proc = subprocess.Popen([str(system_venv / "bin" / "hermes-admin"), "--root", str(alice.root),
                             "--config", str(config), "daemon"], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                            env=env, cwd="/")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            if any(n["event"] == "delete" for n in notes(markers, "rec")):
                break
            time.sleep(0.2)
        assert proc.poll() is None, f"the daemon exited early ({proc.returncode}): {(tmp_path / 'daemon.err').read_text()}"
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(15)
            assert code == 0, f"the daemon exited {code} on SIGTERM"
        except subprocess.TimeoutExpired:
            pytest.fail(f"the daemon did not stop within 15 s of SIGTERM: {(tmp_path / 'daemon.err').read_text()[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close(), err.close()
    log = (tmp_path / "daemon.err").read_text()
    records = notes(markers)
    assert_never_root(records)
    assert [n for n in records if n.get("event") == "delete"], f"her plugin never recorded an event\n{log[-3000:]}"
    for record in records:
        assert_hers(record, alice)
        assert "SECRET_TOKEN" not in record["env"] and set(record["env"]) <= CLEAN_ENV, record["env"]
    assert root_owned(alice.home) == [], log[-3000:]
