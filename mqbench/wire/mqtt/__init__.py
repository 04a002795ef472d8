"""MQTT 3.1.1 and 5 wire format, shared by the client transport, the built-in broker and
the calibration relay.

Modules: ``primitives`` (packet types, variable-length integers, fields, the body reader),
``reason_codes`` (CONNACK return codes, MQTT 5 reason codes), ``errors`` (protocol and codec
errors with their reason code), ``properties`` (MQTT 5 properties), ``packets`` (packet
dataclasses and the hot-path PUBLISH encoders), ``decode`` (one packet from bytes),
``parser`` (the incremental stream parser with its fast paths).
"""
