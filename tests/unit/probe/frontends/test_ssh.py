"""The ssh front end's checks (imagekit/probe/frontends/ssh.py) outside an image: the client command
every login attempt runs (sshd itself runs only in an ssh image: tests/integration/test_frontends.py)."""

from __future__ import annotations

from imagekit.probe.frontends import ssh


def test_a_login_trusts_only_the_host_key_it_was_given() -> None:
    command = ssh.ssh_cmd(2222, "/tmp/known", "dev", ["-i", "/tmp/key"])
    assert command[:3] == ["ssh", "-F", "/dev/null"]  # no user or system ssh_config changes it
    assert "StrictHostKeyChecking=yes" in command and "UserKnownHostsFile=/tmp/known" in command
    assert "GlobalKnownHostsFile=/dev/null" in command and "LogLevel=ERROR" in command
    assert command[-3:] == ["-i", "/tmp/key", "dev@127.0.0.1"]
    assert command[command.index("-p") + 1] == "2222"
    assert "LogLevel=DEBUG1" in ssh.ssh_cmd(2222, "/tmp/known", "dev", [], log_level="DEBUG1")
