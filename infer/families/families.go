// Package families registers every model family generate runs, with the
// text encoder and VAE kinds they use, by importing their packages for
// their side effect (as database/sql drivers register themselves): a
// program that generates imports this package once.
package families

import (
	_ "github.com/sdtool/sdtool/infer/arch/flux"
	_ "github.com/sdtool/sdtool/infer/arch/qwenimage"
	_ "github.com/sdtool/sdtool/infer/arch/sd"
	_ "github.com/sdtool/sdtool/infer/arch/sd3"
	_ "github.com/sdtool/sdtool/infer/arch/wan"
	_ "github.com/sdtool/sdtool/infer/arch/zimage"
)
