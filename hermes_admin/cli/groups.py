"""The command groups' extras: a mistyped command answered with the nearest ones, as git does, and
a command's option written before the command answered with where it goes."""

from __future__ import annotations

import difflib

import click


class SuggestingGroup(click.Group):
    """A group that answers a mistyped command with the nearest ones (`hermes-admin purg`), and a
    command's own option given before it (`hermes-admin -p work run`) with the order that works."""

    def resolve_command(self, ctx, args):
        name = click.utils.make_str(args[0]) if args else None
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            near = difflib.get_close_matches(name, self.list_commands(ctx), n=3)
            if near:
                ctx.fail(f"No such command {name!r}. Did you mean {' or '.join(map(repr, near))}?")
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx, args):
        given = list(args)  # the parser consumes `args` as it goes
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            owner = self._owner_of(ctx, exc.option_name, given)
            if owner is None:
                raise
            raise click.NoSuchOption(exc.option_name, message=(
                f"No such option: {exc.option_name} (it is an option of '{owner}': write it after the command, "
                f"as in '{ctx.command_path} {owner} {exc.option_name} ...')"), possibilities=exc.possibilities,
                ctx=ctx) from None

    def _owner_of(self, ctx, option: str, args: list[str]) -> str | None:
        """The command named later on the line (or one of its subcommands) that takes `option`: the
        word right after the option is its value when a command is named after it (`-p purge run`)."""
        words = [a for i, a in enumerate(args) if not a.startswith("-")
                 and not (i and args[i - 1] == option and any(self.get_command(ctx, later) for later in args[i + 1:]))]
        for position, word in enumerate(words):
            command = self.get_command(ctx, word)
            if command is None:
                continue
            chain = [word]
            if isinstance(command, click.Group) and position + 1 < len(words):
                sub = command.get_command(ctx, words[position + 1])
                if sub is not None:
                    command, chain = sub, [word, words[position + 1]]
            if any(option in p.opts or option in p.secondary_opts for p in command.params):
                return " ".join(chain)
            return None
        return None
