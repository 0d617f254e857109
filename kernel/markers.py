"""The pluggy markers; one project name, ``rmq``."""

import pluggy

PROJECT = "rmq"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
