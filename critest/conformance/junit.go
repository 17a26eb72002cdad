package conformance

import (
	"encoding/xml"
	"fmt"
	"os"
	"sort"
)

// JUnit is what a JUnit XML report (Kubernetes' e2e.test writes one into its
// -report-dir) says about a run: the counts and the failed and skipped tests.
type JUnit struct {
	Tests, Failures, Errors, Skipped int
	Failed                           []string // names of failed tests, sorted
	SkippedTests                     []string // "name: message" of skipped tests, sorted
}

// Passed is the number of tests that neither failed nor were skipped.
func (j JUnit) Passed() int { return j.Tests - j.Failures - j.Errors - j.Skipped }

func (j JUnit) String() string {
	return fmt.Sprintf("junit: %d tests, %d passed, %d failed, %d errors, %d skipped", j.Tests, j.Passed(), j.Failures, j.Errors, j.Skipped)
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
	} `xml:"error"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

type junitSuite struct {
	Cases []junitCase `xml:"testcase"`
}

// ReadJUnit parses the report at path: a <testsuites> of <testsuite>s, or one
// <testsuite>. The counts are the test cases', not the suites' attributes.
func ReadJUnit(path string) (JUnit, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return JUnit{}, err
	}
	var doc struct {
		XMLName xml.Name
		Suites  []junitSuite `xml:"testsuite"`
		Cases   []junitCase  `xml:"testcase"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return JUnit{}, fmt.Errorf("%s: %w", path, err)
	}
	cases := doc.Cases
	for _, s := range doc.Suites {
		cases = append(cases, s.Cases...)
	}
	var j JUnit
	for _, c := range cases {
		j.Tests++
		switch {
		case c.Failure != nil:
			j.Failures++
			j.Failed = append(j.Failed, c.Name)
		case c.Error != nil:
			j.Errors++
			j.Failed = append(j.Failed, c.Name)
		case c.Skipped != nil:
			j.Skipped++
			j.SkippedTests = append(j.SkippedTests, c.Name+": "+c.Skipped.Message)
		}
	}
	sort.Strings(j.Failed)
	sort.Strings(j.SkippedTests)
	return j, nil
}
