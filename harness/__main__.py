from harness.cli import command

command()
