"""The parts of moetune's triton helper; worker/moetune_helper.py is its entry point (worker/HELPER.md)."""
