"""The quota tests judge small batches: the compiled kernel loads at the first of them
(``kernel.LOAD_AFTER`` 0), as in a process that has judged enough, whatever ran before or alone."""

import pytest


@pytest.fixture(autouse=True)
def _kernel_at_once(monkeypatch):
    from pidquota.quota import kernel

    monkeypatch.setattr(kernel, "LOAD_AFTER", 0)
