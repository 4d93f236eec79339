package infer_test

// The core's tests load real models, whose families register themselves.
import _ "github.com/sdtool/sdtool/infer/families"
