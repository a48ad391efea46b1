"""The builders `imagekit build` runs on, one module each (classic, buildkit) behind ``BuildBackend``
(base); ``choose.backend_for`` picks the run's, once, by ``BuilderKind``."""
