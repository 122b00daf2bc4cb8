"""Target profiles: presets and the description of the machine a worker runs on."""
