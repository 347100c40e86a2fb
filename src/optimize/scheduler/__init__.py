"""Devices, pools and capacity: what the kernel's scheduler (`optimize.jobs.scheduler`) grants from."""
