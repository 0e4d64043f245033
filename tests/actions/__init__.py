"""Tests of the actuators (autoscaler.controller) against the emulated API server."""
