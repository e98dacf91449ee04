"""A public key file is trusted only when this uid or root owns it and no group or other may write it (attacker's
review: a job of the agent's uid dropping `controller.<id>.pub` into the key directory made its own key trusted)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from vigil.signing import KeyStore, Role

pytestmark = pytest.mark.pure


def test_foreign_or_writable_public_keys_are_not_trusted(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.ensure()
    (pub,) = (tmp_path / "keys").glob("controller.*.pub")
    kid = pub.name.split(".", 1)[1].removesuffix(".pub")
    planted = tmp_path / "keys" / f"analyzer.{kid}.pub"  # a key the planter holds, under a role it may not have
    shutil.copy(pub, planted)
    planted.chmod(0o666)
    assert (Role.CONTROLLER, kid) in store.public_keys()
    assert (Role.ANALYZER, kid) not in store.public_keys(), "a group/other-writable key file is not trusted"
    planted.chmod(0o644)
    assert (Role.ANALYZER, kid) in store.public_keys()  # (as the store's own uid wrote it)
    if os.geteuid() == 0:
        os.chown(planted, 65534, 65534)
        assert (Role.ANALYZER, kid) not in store.public_keys(), "a key file another uid owns is not trusted"
