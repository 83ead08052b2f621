"""The side that may run as root: it never opens, creates or removes anything inside a home.

It reads the admin config, finds roots and users, decides who owns each profile
(by `lstat`, never through a symlink), starts one worker per owner, gathers
their reports, writes metrics and runs the daemon's schedule. Everything that
touches a home runs in `hermes_admin.profile`, as the home's owner; what
crosses between the two is `hermes_admin.protocol`.
"""
