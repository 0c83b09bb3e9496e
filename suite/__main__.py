from suite.cli import main  # main() sets the environment torch needs before importing it

raise SystemExit(main())
