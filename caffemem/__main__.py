"""`python -m caffemem`: the same command as the `caffemem` script."""

from caffemem.cli import main

if __name__ == "__main__":
    main(prog_name="caffemem")
