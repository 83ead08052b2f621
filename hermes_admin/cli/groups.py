"""The command groups' one extra: a mistyped command answered with the nearest ones, as git does."""

from __future__ import annotations

import difflib

import click


class SuggestingGroup(click.Group):
    """A group that answers a mistyped command with the nearest ones (`hermes-admin purg`)."""

    def resolve_command(self, ctx, args):
        name = click.utils.make_str(args[0]) if args else None
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            near = difflib.get_close_matches(name, self.list_commands(ctx), n=3)
            if near:
                ctx.fail(f"No such command {name!r}. Did you mean {' or '.join(map(repr, near))}?")
        return super().resolve_command(ctx, args)
