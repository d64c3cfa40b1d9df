package machinery

import "errors"

var errNotBuilt = errors.New("boxcutter is not in this build of operator-controller (run it with --feature-gates=BoxcutterRuntime=false)")
