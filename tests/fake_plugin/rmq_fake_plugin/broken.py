"""Wrong on purpose: importing this module fails, as a broken third-party release would."""

raise ImportError("rmq_fake_plugin.broken needs a module that is not installed (test fixture)")
