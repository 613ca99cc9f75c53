"""The demo's scenarios: one module ``scenario_*`` per real failure, run without and with
mpcompat by ``python -m mpcompat demo`` (:mod:`mpcompat.cli.demo`)."""
