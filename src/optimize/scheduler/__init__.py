"""Devices, pools and claims; the scheduler loop comes with runs."""
