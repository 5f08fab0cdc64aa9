"""A pytest plugin for the probe of a side bias (`-p tools.probes.b_first`): the paired engine prepares side B
before side A, so that a device-time gap that follows the preparation order shows as A slower instead of B."""

from perfgate.ab import pair_workers

_init = pair_workers.Duet.__init__


def _b_first(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.first = "b"


pair_workers.Duet.__init__ = _b_first
