"""Build workload R, a store shaped like a real user's, with the real Hermes Agent (run inside the peer's venv).

Usage: python build_realistic.py HOME NOW [--scale F] [--field]

Runs inside the venv of the Hermes release that is to write the store: 0.19.0 (tests/peer.py's, the
default of bench/run.py) or 0.22.2 (schema 31; set HERMES_HOME and HOME to a scratch folder first, as
bench/run.py does, or importing it creates ~/.hermes). The shape (sessions, sides, sizes, lineages,
text) is the same for every release; what differs is how the release stores it:
- 0.19.0 keeps system prompts inline (`sessions.system_prompt`); schema 26 and later keep them once in
  `system_prompts`, named by `sessions.system_prompt_hash` (written with Hermes' own
  `_store_system_prompt`);
- where the release has them (0.22.2), message rows are made by Hermes' own row builder
  (`_message_row_params`, with `message_uid`, tool-call uids and display identity minted as its
  `append_message` mints them) and inserted with its own INSERT;
- the journal mode is the one the release gives a new store (0.22.2 on SQLite < 3.51.3: DELETE).

Scale 1 is ~4,000 sessions (~40 % past a 90-day retention) and a store of ~1 GB;
--scale 0.05 builds a ~50 MB version for quick checks. Deterministic (fixed seed)
for a given scale and NOW.

What is in it, and why:
- Agent turns: a user message (prose, lognormal around ~200 characters), then
  assistant turns, ~40 % of them with `tool_calls` (a JSON list of OpenAI-style
  function calls with JSON arguments), each call answered by a `tool` row (its
  `tool_call_id` and `tool_name`) holding code, logs, JSON or prose, mostly
  inside the tool's JSON envelope as Hermes stores it ({"output": ...,
  "exit_code": ...}, {"content": ...}, ...): lognormal around ~2 KB with a long
  tail capped at 50,000 characters. Some assistant turns carry `reasoning`
  (not indexed).
- Vocabulary: ~200 common words, Zipf-distributed (s = 1, as in English), so
  the first of them are in nearly every message (the FTS doclists that span
  the whole index), plus identifiers (function names, classes, paths, dotted
  names, hex ids) drawn from a Zipf tail, plus ids that occur once (tool call
  ids, request ids).
- Messages per session: lognormal (median ~15, long tail), plus exactly two
  sessions of ~3,000 messages (one old, one recent) and two of ~1,000 (one
  each), scaled with --scale.
- Lineages: some sessions have delegate subagent runs (`parent_session_id`
  and `model_config._delegate_from`), some are compression chains (parent
  ended with 'compression', continuation as its child).
- Every session (and every unit) lies wholly on one side of the 90-day
  cutoff: started and ended more than 91 days before NOW, or started less
  than 85 days before it. ~1 % of old sessions are open (ended_at NULL:
  nobody deletes them), ~5 % of recent ones too; open sessions get no children.
- Per session, `sessions/<id>.jsonl`, `<id>.json` for most, a request dump
  for a few, each a few hundred bytes (R); with --field (workload RF), the files
  a busy real home keeps beside its store, sized as Hermes writes them (see
  `field_files`), and tool results a third longer (a ~1.2 GB store at scale 1);
  system prompts (Hermes 0.19's schema keeps them inline in
  `sessions.system_prompt`, a few variants of ~4-12 KB, as Hermes'
  `update_system_prompt` writes them) and `session_model_usage` rows for most.
- Every row goes through Hermes' write path (`SessionDB._execute_write`, its
  triggers filling both FTS5 indexes, messages_fts and messages_fts_trigram);
  rows are batched per transaction only for build speed. At the end the FTS
  indexes are merged with Hermes' own `optimize_fts()` (what its periodic
  maintenance leaves), and the live session "bench-live" is created for the
  concurrent writer.

Prints a JSON summary on stdout.
"""

import argparse
import hashlib
import itertools
import json
import math
import os
import random
import sqlite3
import sys
import time
from pathlib import Path

from hermes_state import SessionDB

DAY = 86400.0
SEED = 20260515
TOOL_RESULT_MEDIAN = {False: 2000, True: 3300}  # characters; --field: the held-out 1.2 GB store's

COMMON = list(dict.fromkeys("""the a to of and in is it that for on with this you be as are not at by or from have an was but
can will if we so do use file run test error code function return value line new add get set check call
need now one all out up when which there more what just then here make see also than into only should like
time data name path type first update fix change output input result list before after would could try
because about each some other any way work using used been has had does did how why where them they these
those our your my their its his her me us no yes ok done next last same still already again because while
build config server client request response message session user tool agent model task step issue case
default option version module package import class method object string number field key table query
start stop open close read write send load save parse format print log debug info warning true false none
null empty missing found failed passed works looks think let me i'll i'm it's don't can't should've there's
content exit success total matches lines size truncated arguments
""".split()))

TOOLS = ["terminal", "read_file", "write_file", "patch", "search_files", "web_search", "web_extract",
         "execute_code", "browser_navigate", "todo", "memory", "session_search", "delegate_task", "skill_view",
         "vision_analyze"]
TOOL_WEIGHTS = [30, 22, 6, 8, 12, 4, 3, 5, 2, 3, 1, 1, 1, 1, 1]
MODELS = ["anthropic/claude-sonnet-4", "openai/gpt-5", "google/gemini-2.5-pro", "qwen/qwen3-coder",
          "anthropic/claude-opus-4", "deepseek/deepseek-chat"]
SOURCES = ["cli", "cli", "cli", "tui", "telegram", "discord", "cron"]
SYLLABLES = ("load save parse read write get set make build run check send fetch sync merge split find scan "
             "open close start stop init reset flush apply handle render resolve compute update delete insert "
             "config session message store cache index token user agent model tool state queue event batch "
             "file path node tree graph lock lease worker job task plan step view table row column schema "
             "header body result error retry timeout limit offset cursor buffer stream chunk frame").split()
EXTS = [".py", ".py", ".py", ".ts", ".js", ".rs", ".go", ".md", ".json", ".yaml", ".toml", ".sh", ".sql", ".txt"]
LEVELS = ["INFO"] * 6 + ["DEBUG"] * 3 + ["WARNING", "ERROR"]


class Vocab:
    """The common words and a Zipf tail of identifiers, built from a seed of their own."""

    def __init__(self, n_idents: int):
        r = random.Random(SEED + 1)
        self.common = COMMON
        self.common_cw = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(COMMON))))
        idents, seen = [], set()
        while len(idents) < n_idents:
            kind = r.random()
            parts = r.choices(SYLLABLES, k=r.randint(1, 3))
            if kind < 0.35:
                ident = "_".join(parts)
            elif kind < 0.5:
                ident = "".join(p.capitalize() for p in parts) + r.choice(["", "", "Error", "Manager", "Config"])
            elif kind < 0.72:
                ident = "/".join(r.choices(SYLLABLES, k=r.randint(1, 4))) + "/" + "_".join(parts) + r.choice(EXTS)
            elif kind < 0.87:
                ident = "%0*x" % (r.choice([7, 8, 12, 16]), r.getrandbits(64))
            else:
                ident = ".".join(r.choices(SYLLABLES, k=r.randint(2, 3))) + "." + "_".join(parts)
            if r.random() < 0.2:
                ident += str(r.randint(0, 99))
            if ident not in seen:
                seen.add(ident)
                idents.append(ident)
        self.idents = idents
        self.ident_cw = list(itertools.accumulate(1.0 / (i + 1) ** 1.05 for i in range(n_idents)))
        self.paths = [i for i in idents if "/" in i]
        self.paths_cw = list(itertools.accumulate(1.0 / (i + 1) ** 1.05 for i in range(len(self.paths))))


def lognormal(r: random.Random, median: float, sigma: float, cap: int, floor: int = 8) -> int:
    return max(floor, min(cap, int(median * math.exp(sigma * r.gauss(0, 1)))))


class Gen:
    """Text of each kind, about `chars` characters long."""

    def __init__(self, rng: random.Random, vocab: Vocab):
        self.r, self.v = rng, vocab

    def ids(self, k: int) -> list[str]:
        return self.r.choices(self.v.idents, cum_weights=self.v.ident_cw, k=k)

    def path(self) -> str:
        return self.r.choices(self.v.paths, cum_weights=self.v.paths_cw, k=1)[0]

    def hexid(self, n: int = 12) -> str:
        return "%0*x" % (n, self.r.getrandbits(4 * n))

    def prose(self, chars: int) -> str:
        n = max(2, int(chars / 6.3))
        r = self.r
        toks = r.choices(self.v.common, cum_weights=self.v.common_cw, k=n)
        k = n // 9 + (r.random() < (n % 9) / 9)
        for ident in self.ids(k):
            toks[r.randrange(n)] = f"`{ident}`" if r.random() < 0.3 else ident
        for i in range(r.randint(6, 14), n, 12):
            toks[i] += "." if i % 60 else ".\n\n"
        toks[0] = toks[0].capitalize()
        return " ".join(toks)

    def lognormal(self, median: float, sigma: float, cap: int, floor: int = 8) -> int:
        return lognormal(self.r, median, sigma, cap, floor)

    def code(self, chars: int) -> str:
        r, out, size = self.r, [], 0
        while size < chars:
            a, b, c, d = self.ids(4)
            a, b, c = (x.replace("/", "_").replace(".", "_") for x in (a, b, c))
            pick = r.random()
            if pick < 0.12:
                line = f"def {a}({b}, {c}=None):"
            elif pick < 0.4:
                line = f"    {a} = {b}.{c}({d!r})"
            elif pick < 0.5:
                line = f"    if {a} is None or not {b}:"
            elif pick < 0.57:
                line = f"        raise {c.title().replace('_', '')}Error(\"{self.prose(40)}\")"
            elif pick < 0.68:
                line = f"    return {a}[{b!r}]"
            elif pick < 0.75:
                line = f"from {b} import {a}, {c}"
            elif pick < 0.86:
                line = f"    # {self.prose(50)}"
            else:
                line = f"    for {a} in {b}.{c}():"
            if r.random() < 0.3:
                line = f"{r.randint(1, 2400):>5}\t{line}"  # read_file's numbered lines
            out.append(line)
            size += len(line) + 1
        return "\n".join(out)

    def logs(self, chars: int) -> str:
        r, out, size = self.r, [], 0
        while size < chars:
            line = (f"2026-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:"
                    f"{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999):03d}Z "
                    f"{r.choice(LEVELS)} [{self.ids(1)[0]}] {self.prose(r.randint(20, 90))} "
                    f"({self.path()}:{r.randint(1, 900)}) req={self.hexid(8)}")
            out.append(line)
            size += len(line) + 1
        return "\n".join(out)

    def json_doc(self, chars: int) -> str:
        r, items, size = self.r, [], 2
        while size < chars:
            a, b, c = self.ids(3)
            item = {"id": self.hexid(12), "name": a, "path": self.path(), "status": r.choice(COMMON[:80]),
                    "count": r.randint(0, 10_000), "tags": [b, c], "note": self.prose(r.randint(10, 80))}
            items.append(item)
            size += len(json.dumps(item)) + 8
        return json.dumps({"results": items, "total": len(items)}, indent=2)

    def tool_body(self, tool: str, chars: int) -> str:
        r = self.r
        if tool in ("read_file", "write_file", "patch", "execute_code"):
            kinds = ["code"] * 8 + ["logs", "json"]
        elif tool == "terminal":
            kinds = ["logs"] * 5 + ["code"] * 3 + ["json", "prose"]
        elif tool == "search_files":
            kinds = ["logs", "code", "code"]
        elif tool in ("web_search", "web_extract", "browser_navigate", "vision_analyze", "skill_view"):
            kinds = ["prose"] * 4 + ["json"]
        else:
            kinds = ["json"] * 3 + ["prose"]
        kind = r.choice(kinds)
        if kind == "code":
            return self.code(chars)
        if kind == "logs":
            return self.logs(chars)
        if kind == "json":
            return self.json_doc(chars)
        return self.prose(chars)

    def tool_result(self, tool: str, chars: int, cap: int = 50_000) -> str:
        """What Hermes stores for a tool's answer: mostly the tool's JSON envelope around its text."""
        r, body = self.r, self.tool_body(tool, chars)[:cap]
        if r.random() < 0.1:
            return body  # a tool that answers in plain text
        while True:
            if tool == "terminal":
                doc = {"output": body, "exit_code": r.choice([0, 0, 0, 1, 2]), "error": None}
            elif tool == "read_file":
                doc = {"content": body, "total_lines": body.count("\n") + 1, "file_size": len(body),
                       "truncated": len(body) > 20_000}
            elif tool == "search_files":
                doc = {"total_count": body.count("\n") + 1, "matches": body}
            elif tool in ("web_search", "web_extract", "browser_navigate"):
                doc = {"success": True, "data": body}
            else:
                doc = {"success": True, "result": body}
            text = json.dumps(doc)
            if len(text) <= cap:
                return text
            body = body[:len(body) - (len(text) - cap) - 16]

    def arguments(self, tool: str) -> dict:
        r = self.r
        if tool == "terminal":
            return {"command": r.choice(["pytest -q ", "git diff ", "rg -n ", "ls -la ", "python -m ", "make "])
                    + " ".join(self.ids(r.randint(1, 3))), "timeout": r.choice([60, 120, 300])}
        if tool in ("read_file", "write_file"):
            args = {"path": self.path()}
            if tool == "write_file":
                args["content"] = self.code(self.lognormal(600, 0.8, 8000))
            elif r.random() < 0.4:
                args.update(offset=r.randint(1, 800), limit=r.choice([50, 100, 200]))
            return args
        if tool == "patch":
            return {"path": self.path(), "old_string": self.code(self.lognormal(120, 0.6, 2000)),
                    "new_string": self.code(self.lognormal(150, 0.6, 2000))}
        if tool == "search_files":
            return {"pattern": self.ids(1)[0], "path": self.path().rsplit("/", 1)[0]}
        if tool == "execute_code":
            return {"code": self.code(self.lognormal(300, 0.7, 6000))}
        return {"query": self.prose(self.lognormal(60, 0.5, 400))}


def system_prompts(vocab: Vocab, n: int) -> list[str]:
    g = Gen(random.Random(SEED + 2), vocab)
    return ["You are Hermes Agent, an intelligent AI assistant. " + g.prose(g.r.randint(4000, 12000))
            for _ in range(n)]


def messages_for(g: Gen, sid: str, count: int, start: float, end: float,
                 tool_median: int = TOOL_RESULT_MEDIAN[False]) -> tuple[list[tuple], dict]:
    """`count` message rows for one session, timestamps spread over [start, end]; and its totals."""
    r, rows, tool_calls_total = g.r, [], 0
    step = (end - start) / max(count, 1)
    while len(rows) < count:
        rows.append(("user", g.prose(g.lognormal(160, 0.8, 6000)), None, None, None, None, None))
        while len(rows) < count:
            if r.random() < 0.4:  # an assistant turn with tool calls, each answered by a tool row
                calls = []
                for _ in range(1 if r.random() < 0.7 else r.randint(2, 4)):
                    tool = r.choices(TOOLS, weights=TOOL_WEIGHTS, k=1)[0]
                    calls.append({"id": "call_" + g.hexid(24), "type": "function",
                                  "function": {"name": tool, "arguments": json.dumps(g.arguments(tool))}})
                reasoning = g.prose(g.lognormal(300, 0.8, 4000)) if r.random() < 0.3 else None
                rows.append(("assistant", g.prose(g.lognormal(90, 0.9, 2000)) if r.random() < 0.7 else "",
                             json.dumps(calls), None, None, "tool_calls", reasoning))
                tool_calls_total += len(calls)
                for call in calls:
                    if len(rows) >= count:
                        break
                    name = call["function"]["name"]
                    rows.append(("tool", g.tool_result(name, g.lognormal(tool_median, 1.1, 50_000, 20)), None,
                                 call["id"], name, None, None))
            else:  # the answer: prose, the turn ends
                reasoning = g.prose(g.lognormal(300, 0.8, 4000)) if r.random() < 0.3 else None
                rows.append(("assistant", g.prose(g.lognormal(450, 1.0, 20_000)), None, None, None, "stop",
                             reasoning))
                break
    rows = rows[:count]
    out, chars = [], 0
    for k, (role, content, calls, call_id, tool_name, finish, reasoning) in enumerate(rows):
        ts = start + k * step + r.uniform(0, step * 0.9)
        out.append((sid, role, content, call_id, calls, tool_name, ts, max(1, len(content) // 4), finish, reasoning))
        chars += len(content) + len(calls or "")
    return out, {"chars": chars, "tool_calls": tool_calls_total}


def hermes_row_builder(db):
    """(INSERT, rows -> bind values) made by the release's own message writer, or None where it has no
    row builder of its own (0.19.0: the plain INSERT of main() is the one its append_message runs)."""
    if not hasattr(db, "_message_row_params"):
        return None
    import hermes_state_messages as hm  # 0.22.2: the module that holds append_message

    def rows(msgs):
        tool_uids: dict = {}  # the calls of the session's assistant rows, for their tool rows' uids
        for sid, role, content, call_id, calls, tool_name, ts, tokens, finish, reasoning in msgs:
            msg = {"role": role, "content": content, "tool_call_id": call_id, "tool_calls": calls,
                   "tool_name": tool_name, "token_count": tokens, "finish_reason": finish, "reasoning": reasoning}
            parsed = hm._parse_tool_calls(calls)
            hm.stamp_message_uid(msg)
            db._stamp_tool_call_uids(msg, parsed, tool_uids)
            yield db._message_row_params(sid, role, msg, parsed, ts, keep_reasoning=True)

    return hm._INSERT_MESSAGE_SQL, rows


def field_files(r: random.Random, g: Gen, sid: str, msgs: list[tuple], session: dict,
                started: float, ended: float | None) -> dict[str, str]:
    """A session's files as a busy real home keeps them in `sessions/` (hermes-store.md §4), with their
    real sizes: ~1.9 files a session on average, as the held-out store's 7,609 files for 4,002 sessions.
    - `session_<id>.json` (70 %): the agent's full-transcript snapshot (`save_session_log`, rewritten
      every turn: the session's row and every message);
    - `<id>.jsonl` (60 %): a transcript JSONL, one message a line (older gateways, or diverted writes);
    - `<id>.json` (50 %): the legacy name, the gateway's per-session record (a few KB);
    - `request_dump_<id>_<YYYYmmdd_HHMMSS_ffffff>.json` (10 % of sessions, 1-3 each): a whole API
      request body (the system prompt, the conversation so far, the tools), lognormal around 400 KB,
      up to 2 MB."""
    def message(m):
        return {"role": m[1], "content": m[2], "tool_call_id": m[3], "tool_calls": json.loads(m[4]) if m[4] else None,
                "tool_name": m[5], "timestamp": m[6], "finish_reason": m[8]}

    files: dict[str, str] = {}
    if r.random() < 0.7:
        files[f"session_{sid}.json"] = json.dumps(
            {"session_id": sid, "model": session["model"], "platform": session["source"],
             "session_start": started, "last_updated": ended or started, "message_count": len(msgs),
             "messages": [message(m) for m in msgs]}, indent=2)
    if r.random() < 0.6:
        files[f"{sid}.jsonl"] = "".join(json.dumps(message(m)) + "\n" for m in msgs)
    if r.random() < 0.5:
        files[f"{sid}.json"] = json.dumps({"session_id": sid, "session_key": f"agent:main:{session['source']}:"
                                           f"dm:{g.hexid(10)}", "model": session["model"], "cwd": session["cwd"],
                                           "message_count": len(msgs), "title": session["title"],
                                           "last_messages": [message(m) for m in msgs[-3:]]}, indent=2)
    if r.random() < 0.1:
        for k in range(1 if r.random() < 0.7 else r.randint(2, 3)):
            at = started + r.uniform(0, max(1.0, (ended or started) - started))
            stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(at)) + f"_{r.randrange(1_000_000):06d}"
            size = lognormal(r, 400_000, 0.8, 2_000_000, 20_000)
            convo = [message(m) for m in msgs[:40]]
            body = {"timestamp": at, "session_id": sid, "reason": r.choice(["non_retryable_4xx", "max_retries"]),
                    "error": {"status": r.choice([400, 413, 422, 429, 500]), "message": g.prose(120)},
                    "request": {"model": session["model"], "stream": True, "messages": convo,
                                "tools": [{"type": "function", "function": {"name": t, "description": g.prose(200),
                                                                            "parameters": {"type": "object"}}}
                                          for t in TOOLS]}}
            text = json.dumps(body)
            if len(text) < size:  # the rest of a long context: earlier tool output, as the request carried it
                body["request"]["messages"].insert(0, {"role": "system", "content": g.prose(size - len(text))})
                text = json.dumps(body)
            files[f"request_dump_{sid}_{stamp}.json"] = text
    return files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("home", type=Path)
    parser.add_argument("now", type=float)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--field", action="store_true",
                        help="workload RF: the files of a busy real home beside the store, real-sized")
    args = parser.parse_args()
    home, now, scale = args.home, args.now, args.scale
    rng = random.Random(SEED)  # the shape: sessions, sides, sizes, lineages, files
    vocab = Vocab(60_000)
    g = Gen(random.Random(SEED + 3), vocab)  # the text: tuning its sizes leaves the shape as it is
    field_gen = Gen(random.Random(SEED + 5), vocab)  # --field's files: drawn apart, R's shape and text stay
    prompts = system_prompts(vocab, 12)
    sessions_dir = home / "sessions"
    sessions_dir.mkdir(parents=True, exist_ok=True)
    db = SessionDB(home / "state.db")
    columns = {r[1] for r in db._conn.execute("PRAGMA table_info(sessions)")}
    inline_prompt = "system_prompt" in columns and "system_prompt_hash" not in columns
    hashed_prompt = "system_prompt_hash" in columns and hasattr(SessionDB, "_store_system_prompt")
    hermes_rows = hermes_row_builder(db)
    has_usage = db._conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='session_model_usage'").fetchone() is not None

    total = max(20, round(4000 * scale))
    giants = [max(60, round(3000 * scale)), max(60, round(3000 * scale)),
              max(30, round(1000 * scale)), max(30, round(1000 * scale))]  # old, recent, old, recent
    stats = {"sessions": 0, "old": 0, "old_open": 0, "open": 0, "doomed": 0, "messages": 0, "characters": 0,
             "tool_calls": 0, "files": 0, "delegates": 0, "compression_children": 0, "usage_rows": 0,
             "system_prompts": 0, "largest_session_messages": 0, "longest_message": 0, "file_bytes": 0,
             "doomed_files": 0, "doomed_file_bytes": 0}
    batch: list[tuple] = []  # (session row dict, message rows, usage rows, system prompt or None)
    batch_chars = [0]
    began_build = time.monotonic()
    progress = [began_build]

    def flush():
        if not batch:
            return
        session_cols = list(batch[0][0])

        def work(conn):
            for session, msgs, usage, prompt in batch:
                if prompt is not None:  # schema 26+: the prompt once in system_prompts, as Hermes stores it
                    SessionDB._store_system_prompt(conn, prompt)
                conn.execute(f"INSERT INTO sessions ({', '.join(session_cols)}) VALUES "
                             f"({', '.join('?' * len(session_cols))})", [session[c] for c in session_cols])
                if hermes_rows:
                    conn.executemany(hermes_rows[0], hermes_rows[1](msgs))
                else:
                    conn.executemany(
                        "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, "
                        "timestamp, token_count, finish_reason, reasoning) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        msgs)
                if usage:
                    conn.executemany(
                        "INSERT INTO session_model_usage (session_id, model, billing_provider, task, "
                        "api_call_count, input_tokens, output_tokens, cache_read_tokens, estimated_cost_usd, "
                        "cost_status, cost_source, first_seen, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        usage)
        db._execute_write(work)
        batch.clear()
        batch_chars[0] = 0
        if time.monotonic() - progress[0] > 30:
            progress[0] = time.monotonic()
            print(f"  {stats['sessions']} of ~{total} sessions, {stats['messages']} messages, "
                  f"{stats['characters'] / 1e6:.0f} M characters, {time.monotonic() - began_build:.0f} s",
                  file=sys.stderr, flush=True)

    def add(sid, count, started, ended, old, *, parent=None, delegate_from=None, end_reason=None, source=None):
        """One session: its row, messages, usage rows and files, queued for the next batch."""
        msgs, info = messages_for(g, sid, count, started, ended if ended is not None else started + count * 60,
                                  TOOL_RESULT_MEDIAN[args.field])
        model = rng.choice(MODELS)
        inp = sum(m[7] for m in msgs) * rng.randint(3, 12)
        out_tokens = sum(m[7] for m in msgs if m[1] == "assistant")
        cost = round((inp * 3 + out_tokens * 15) / 1e6, 4)
        session = {
            "id": sid, "source": source or rng.choice(SOURCES), "model": model,
            "model_config": json.dumps({"max_iterations": 90, **({"_delegate_from": delegate_from}
                                                                 if delegate_from else {})}),
            "parent_session_id": parent, "started_at": started, "ended_at": ended,
            "end_reason": end_reason or ("user_exit" if ended is not None else None),
            "message_count": len(msgs), "tool_call_count": info["tool_calls"],
            "input_tokens": inp, "output_tokens": out_tokens, "cache_read_tokens": inp // 2,
            "api_call_count": sum(1 for m in msgs if m[1] == "assistant"), "billing_provider": "openrouter",
            "estimated_cost_usd": cost, "cost_status": "estimated", "cost_source": "pricing_table",
            "cwd": f"/home/user/src/{rng.choice(SYLLABLES)}-{rng.choice(SYLLABLES)}",
            "git_branch": rng.choice(["main", "main", "dev", f"fix/{g.ids(1)[0][:20]}"]),
            "title": (g.prose(rng.randint(20, 50)).split(".")[0][:60] + f" #{stats['sessions']}")
            if parent is None and rng.random() < 0.7 else None,
        }
        prompt = None
        if inline_prompt or hashed_prompt:  # the same draws either way: the same shape for every release
            prompt = rng.choice(prompts) if rng.random() < 0.6 else None
            stats["system_prompts"] += prompt is not None
            if inline_prompt:
                session["system_prompt"], prompt = prompt, None
            else:
                session["system_prompt_hash"] = (hashlib.sha256(prompt.encode("utf-8")).hexdigest()
                                                 if prompt is not None else None)
        usage = []
        if has_usage and rng.random() < 0.75:
            last = ended if ended is not None else started
            usage.append((sid, model, "openrouter", "", session["api_call_count"], inp, out_tokens, inp // 2, cost,
                          "estimated", "pricing_table", started, last))
            for task in ("title_generation", "compression"):
                if rng.random() < (0.4 if task == "title_generation" else 0.1):
                    usage.append((sid, "google/gemini-2.5-flash", "openrouter", task, 1, rng.randint(200, 9000),
                                  rng.randint(10, 400), 0, 0.0003, "estimated", "pricing_table", started, last))
        stats["usage_rows"] += len(usage)
        stats["sessions"] += 1
        stats["old"] += old
        stats["open"] += ended is None
        stats["old_open"] += old and ended is None
        stats["doomed"] += old and ended is not None  # open sessions get no children: whole units
        stats["messages"] += len(msgs)
        stats["characters"] += info["chars"]
        stats["tool_calls"] += info["tool_calls"]
        stats["largest_session_messages"] = max(stats["largest_session_messages"], len(msgs))
        stats["longest_message"] = max([stats["longest_message"], *(len(m[2]) for m in msgs)])
        # files: a transcript for every session, a .json for most, a request dump for a few
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(started)) + "_000001"
        files = {f"{sid}.jsonl": "".join(json.dumps({"role": m[1], "content": m[2][:200]}) + "\n" for m in msgs[:4])}
        if rng.random() < 0.8:
            files[f"{sid}.json"] = json.dumps({"session_id": sid, "model": model, "message_count": len(msgs)})
        if rng.random() < 0.05:
            files[f"request_dump_{sid}_{stamp}.json"] = json.dumps({"model": model, "messages": len(msgs)})
        if args.field:  # R's draws above made all the same (its shape), these files instead
            files = field_files(field_gen.r, field_gen, sid, msgs, session, started, ended)
        for name, text in files.items():
            path = sessions_dir / name
            path.write_text(text)
            os.utime(path, (ended or started, ended or started))
        stats["files"] += len(files)
        stats["file_bytes"] += sum(len(t) for t in files.values())
        if old and ended is not None:
            stats["doomed_files"] += len(files)
            stats["doomed_file_bytes"] += sum(len(t) for t in files.values())
        batch.append((session, msgs, usage, prompt))
        batch_chars[0] += info["chars"]
        if batch_chars[0] > 16_000_000 or len(batch) >= 400:
            flush()

    def new_id(started: float) -> str:
        return time.strftime("%Y%m%d_%H%M%S", time.gmtime(started)) + f"_{stats['sessions']:06x}"

    def window(old: bool, span: float) -> tuple[float, float]:
        """A start and end `span` seconds apart, wholly on one side of the cutoff."""
        if old:
            started = now - rng.uniform(91.5 * DAY + span, 400 * DAY)
        else:
            started = now - rng.uniform(1 * DAY + span, 84.5 * DAY) if span < 83 * DAY else now - 84.5 * DAY
        return started, started + span

    # The giants first, then the crowd; ~40 % of all sessions are old.
    for k, size in enumerate(giants):
        old = k % 2 == 0
        span = (20 if size > 1500 * scale else 6) * DAY * min(1.0, size / 1000)
        started, ended = window(old, span)
        add(new_id(started), size, started, ended, old)
    while stats["sessions"] < total:
        old = rng.random() < 0.4
        count = lognormal(rng, 15, 1.0, 800, 2)
        span = count * rng.uniform(15, 120)
        kind = rng.random()
        opened = rng.random() < (0.01 if old else 0.05)
        if kind < 0.03 and not opened:  # a compression chain: each part ended with 'compression'
            parts = rng.randint(2, 3)
            started, _ = window(old, span * parts)
            parent = None
            for p in range(parts):
                sid = new_id(started)
                last = p == parts - 1
                add(sid, count, started, started + span, old, parent=parent,
                    end_reason=None if last else "compression")
                stats["compression_children"] += parent is not None
                parent, started = sid, started + span + 1
            continue
        started, ended = window(old, span)
        sid = new_id(started)
        add(sid, count, started, None if opened else ended, old)
        if kind > 0.95 and not opened:  # delegate subagent runs inside the parent's window
            for _ in range(rng.randint(1, 3)):
                child_start = started + rng.uniform(0, span * 0.5)
                child_count = lognormal(rng, 12, 0.7, 200, 2)
                add(new_id(child_start), child_count, child_start,
                    child_start + rng.uniform(0.1, 0.5) * (started + span - child_start), old,
                    parent=sid, delegate_from=sid, source="subagent" if rng.random() < 0.5 else None)
                stats["delegates"] += 1
    flush()
    began = time.monotonic()
    db.optimize_fts()  # what Hermes' periodic maintenance leaves
    optimize_s = time.monotonic() - began
    db.create_session("bench-live", "cli", model="bench/model")  # the concurrent writer's session
    db.close()
    stats["sessions"] += 1  # bench-live
    stats["open"] += 1
    conn = sqlite3.connect(home / "state.db")
    stats["fts_rows"] = conn.execute("SELECT COUNT(*) FROM messages_fts").fetchone()[0]
    stats["fts_trigram_rows"] = conn.execute("SELECT COUNT(*) FROM messages_fts_trigram").fetchone()[0]
    conn.close()
    stats["store_bytes"] = sum((home / n).stat().st_size for n in ("state.db", "state.db-wal")
                               if (home / n).exists())
    stats["scale"] = scale
    stats["field"] = args.field
    stats["fts_optimize_s"] = round(optimize_s, 1)
    stats["system_prompt_storage"] = "inline" if inline_prompt else "system_prompts" if hashed_prompt else "none"
    conn = sqlite3.connect(home / "state.db")
    stats["schema_version"] = conn.execute("SELECT version FROM schema_version").fetchone()[0]
    stats["journal_mode"] = conn.execute("PRAGMA journal_mode").fetchone()[0]
    conn.close()
    stats["message_rows"] = "hermes" if hermes_rows else "plain"
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
