"""``mqbench calibrate``: the tool's own latency floor and the generator's ceiling.

* ``relays`` + one module per protocol (``mqtt_relay``, ``nats_relay``, ``redis_relay``,
  ``amqp_relay``, ``zenoh_peer``): minimal broker-less loopback paths, each run in its own
  process (``relay_process``);
* ``measure``: one real mqbench cell (the normal run machinery, numpy analysis) reduced to
  the figures calibration keeps;
* ``ceiling``: the stepping search for the highest offered rate one worker keeps in bounds;
* ``model`` + ``store``: the typed, versioned calibration file and where it lives;
* ``runner``: the whole calibration; ``use``: what ``mqbench run`` does with the file.

See docs/calibration.md.
"""
