"""Dies of an uncaught exception raised in fail()."""


def fail():
    raise ValueError("bad value 42")


fail()
