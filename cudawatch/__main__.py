from cudawatch.cli import main

main()
