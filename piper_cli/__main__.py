from piper_cli import main

main()
