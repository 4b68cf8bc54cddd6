"""The metric vocabulary: the one table of families, the naming rules, the renderer, the parser and
the docs generator. Everything that speaks Prometheus names reads it (``export``, ``sources``,
``validate``, ``config``); it reads only the snapshot model, so it never imports any of them."""
