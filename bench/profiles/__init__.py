"""Where a batch's time goes: py-spy on the driver's Python (driver_profile, a part of the
suite) and Java Flight Recorder on its JVM (jvm_profile, `python -m bench.profiles.jvm_profile`)."""
