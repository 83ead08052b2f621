from dataclasses import dataclass

import pytest

from hermes_admin.profile.lineage import Graph


@dataclass
class R:
    id: str
    parent_id: str | None = None
    end_reason: str | None = None
    delegate_from: str | None = None


GRAPH = Graph([
    R("root", end_reason="compression"),
    R("mid", "root", "compression"),
    R("tip", "mid"),
    R("branch", "root"),  # parent ended by compression, but a delegate? no: compression child too
    R("deleg", "mid", "done", delegate_from="mid"),
    R("deleg2", "deleg", delegate_from="deleg"),
    R("plain"),
    R("forked", "plain"),  # parent not ended by compression: a branch
    R("loop1", "loop2", delegate_from="loop2"),
    R("loop2", "loop1", delegate_from="loop1"),
])


@pytest.mark.parametrize("sid, lineage", [
    ("root", ["root", "branch", "mid", "tip"]),
    ("tip", ["root", "branch", "mid", "tip"]),
    ("plain", ["plain"]),
    ("forked", ["forked"]),
    ("deleg", ["deleg"]),  # delegates are never compression continuations
])
def test_lineage(sid, lineage):
    assert GRAPH.lineage(sid) == lineage


@pytest.mark.parametrize("sid, delegates", [
    ("mid", ["deleg", "deleg2"]),  # recursive
    ("root", []),
    ("loop1", ["loop2"]),  # cycles end, and never include the session itself
])
def test_delegates(sid, delegates):
    assert GRAPH.delegates_of(sid) == delegates


def test_children_kinds():
    assert GRAPH.compression_parent("tip") == "mid"
    assert GRAPH.compression_parent("forked") is None
    assert GRAPH.compression_children("mid") == ["tip"]
    assert GRAPH.other_children("plain") == ["forked"]
    assert GRAPH.other_children("mid") == []
