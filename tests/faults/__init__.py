"""Fault-injection tests: kill storage servers mid-stream and check nothing accepted is lost."""
