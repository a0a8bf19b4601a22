from judgebias.cli import main

main()
