"""`python -m optimize` runs the same CLI as `akka`."""

from optimize.cli.main import run

if __name__ == "__main__":
    run()
