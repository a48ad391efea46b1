"""The front-end check's arguments (imagekit/probe/frontends/env.py): from the labels' options or
the image's environment."""

from __future__ import annotations

from imagekit.probe.frontends import env


def test_arguments_come_from_the_labels_or_the_environment() -> None:
    expect = env.parse_args(["--frontend", "ssh", "--expect-uid", "1000", "--expect-user", "dev"], {})
    assert (expect.frontend, expect.uid, expect.user, expect.jupyterlab) == ("ssh", 1000, "dev", None)
    from_env = env.parse_args([], {"IMAGEKIT_FRONTEND": "jupyter", "IMAGEKIT_EXPECT_JUPYTERLAB": "4.6.6"})
    assert (from_env.frontend, from_env.jupyterlab) == ("jupyter", "4.6.6")
