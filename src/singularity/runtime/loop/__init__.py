"""The living loop: boot, the schedule of cycles or pulses, one cycle, one tool call, shutdown."""
