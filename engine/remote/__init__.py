"""Devices reached over a TVM RPC tracker: the tracker's protocol (``tracker``, no TVM
needed), a session on a device with what it reports about itself (``device``).
A compiled artifact is measured there by ``engine.fusion.device_measure``."""
