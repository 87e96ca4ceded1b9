from ollama_py.cli.main import main

main()
