"""mssod started by socket activation, as msso.socket does: the first connection starts it."""
import shutil
import subprocess

import pytest

from harness import BIN, LOG_DIR, LOGS, ROOT, Broker, wait_for


@pytest.mark.skipif(not shutil.which("systemd-socket-activate"), reason="systemd-socket-activate is not installed")
def test_the_first_connection_starts_the_broker_on_the_passed_socket(desktop, idp):
    broker = Broker(desktop, idp, start=False)
    broker.socket.parent.mkdir(mode=0o700)
    log = LOG_DIR / "mssod-activated.log"
    LOGS.append(log)
    passed = [argument for name in broker.env for argument in ("-E", name)]  # as a unit's Environment=
    activator = subprocess.Popen(["systemd-socket-activate", "-l", str(broker.socket), *passed, str(BIN / "mssod")],
                                 env=broker.env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        wait_for(broker.socket.exists, what="the activation socket")
        assert "listening" not in log.read_text(), "nothing runs before the first connection"
        assert broker.login().returncode == 0, "the first connection is served"
        assert "listening on the socket systemd passed" in log.read_text()
        assert broker.msso("check").returncode == 0
    finally:
        activator.terminate()
        activator.wait(timeout=10)


def test_the_units_name_the_socket_path_and_modes():
    socket_unit = (ROOT / "dist" / "systemd" / "msso.socket").read_text()
    assert "ListenStream=%t/msso/broker.sock" in socket_unit
    assert "DirectoryMode=0700" in socket_unit and "SocketMode=0600" in socket_unit
    service = (ROOT / "dist" / "systemd" / "msso.service").read_text()
    assert "LimitCORE=0" in service and "Requires=msso.socket" in service
