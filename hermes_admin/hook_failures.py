"""A plugin (hook) failure, as one value: made where delivery meets it (profile/hooks/bus.py,
profile/engine/aftermath.py), carried in its task's Result to the host as itself (protocol.py),
folded there to one line per failing plugin per run (report.py) and counted by plugin
(host/metrics.py). Nothing reads its line back: the plugin, the kind of failure and how often it
came back are fields.

It names no profile: the Result that carries it does (the host checks which home a result is
of), and `text` is told whose it is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

EVERY_PLUGIN = "*"  # the plugin of a failure that kept every plugin from running (the plugin process did not start)

# Kinds of failure: a short identifier scripts can match on (each with its own message).
RAISED, TIMED_OUT, PROCESS_DIED, BROKE_PROTOCOL = "raised", "timed out", "process died", "broke the protocol"
NOT_RUN, NOT_LOADED, INTERPRETER = "plugins not run", "failed to load", "interpreter"
STOPPED, OUTBOX = "stopped", "outbox"


@dataclass(frozen=True)
class HookFailure:
    # whose callback failed; EVERY_PLUGIN: none ran; None: not one plugin's (deliveries stopped)
    plugin: str | None = field(metadata={"max_len": 256})
    kind: str = field(metadata={"max_len": 64})  # RAISED, TIMED_OUT, ...: what went wrong
    message: str  # what happened, as said the first time
    # 0: this is the failure's first telling; N: a failure told before came back N more times
    repeats: int = field(default=0, metadata={"range": (0, 1 << 31)})

    def __post_init__(self):
        if self.repeats < 0:
            raise ValueError(f"a hook failure's repeats is a count, not {self.repeats!r}")

    @property
    def occurrences(self) -> int:
        """How many failures this value stands for."""
        return self.repeats or 1

    @property
    def reason(self) -> str:
        """What went wrong, without whose profile: `plugin NAME: message`, or how often it came back."""
        head = f"plugin {self.plugin}: " if self.plugin is not None else ""
        return head + (f"{self.kind} {self.repeats} more time(s)" if self.repeats else self.message)

    def text(self, profile: str) -> str:
        """The one line people read, for the profile (as people read it) whose failure it is."""
        return f"profile '{profile}': {self.reason}"

    def as_dict(self) -> dict:
        return asdict(self)
