from batchscope.main import main

raise SystemExit(main())
