module github.com/shimd/shimd/hack/callwaits

go 1.25.0

require golang.org/x/exp v0.0.0-20260410095643-746e56fc9e2f
