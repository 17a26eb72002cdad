package harness

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
)

// natRule is one "-A CHAIN args..." line of "iptables -t nat -S".
type natRule struct {
	Chain string
	Args  []string // unquoted, without "-A CHAIN"
	Line  string
}

// listNATRules lists the nat table, or returns nil if iptables is missing.
func listNATRules() ([]natRule, map[string]bool, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, nil, nil
	}
	out, err := exec.Command("iptables", "-w", "5", "-t", "nat", "-S").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("iptables -t nat -S: %w", err)
	}
	var rules []natRule
	chains := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := splitQuoted(line)
		switch {
		case len(f) >= 2 && f[0] == "-N":
			chains[f[1]] = true
		case len(f) >= 2 && f[0] == "-A":
			rules = append(rules, natRule{Chain: f[1], Args: f[2:], Line: line})
		}
	}
	return rules, chains, nil
}

// natRulesFor returns the nat rules that refer to an address in subnet, the
// chains made only for it (CNI-DN-*, chains whose rules all refer to it) and
// the rules elsewhere that jump to those chains.
func natRulesFor(subnet *net.IPNet) (rules []natRule, chains []string, err error) {
	all, _, err := listNATRules()
	if err != nil {
		return nil, nil, err
	}
	ours := map[string]bool{}
	for _, r := range all {
		if strings.HasPrefix(r.Chain, "CNI-DN-") && mentionsSubnet(r.Args, subnet) {
			ours[r.Chain] = true
		}
	}
	for _, r := range all {
		if ours[r.Chain] {
			continue
		}
		if mentionsSubnet(r.Args, subnet) || ours[jumpTarget(r.Args)] {
			rules = append(rules, r)
		}
	}
	for c := range ours {
		chains = append(chains, c)
	}
	return rules, chains, nil
}

// deleteNATRules removes the rules natRulesFor finds, then flushes and
// deletes the per-container chains.
func deleteNATRules(subnet *net.IPNet) error {
	rules, chains, err := natRulesFor(subnet)
	if err != nil {
		return err
	}
	var errs []string
	for _, r := range rules {
		args := append([]string{"-w", "5", "-t", "nat", "-D", r.Chain}, r.Args...)
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v: %s", r.Line, err, out))
		}
	}
	for _, c := range chains {
		for _, op := range []string{"-F", "-X"} {
			if out, err := exec.Command("iptables", "-w", "5", "-t", "nat", op, c).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Sprintf("iptables %s %s: %v: %s", op, c, err, out))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func jumpTarget(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-j" || args[i] == "-g" {
			return args[i+1]
		}
	}
	return ""
}

// mentionsSubnet reports whether an argument is an address, CIDR or
// address:port (as in --to-destination) inside subnet.
func mentionsSubnet(args []string, subnet *net.IPNet) bool {
	for _, a := range args {
		a = strings.TrimPrefix(a, "!")
		if i := strings.IndexAny(a, "/:-"); i >= 0 {
			a = a[:i]
		}
		if ip := net.ParseIP(a); ip != nil && subnet.Contains(ip) {
			return true
		}
	}
	return false
}

// splitQuoted splits an iptables-save line on spaces, honouring "..." with
// \" escapes, and returns unquoted words.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	inWord, inQuote := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			inQuote, inWord = !inQuote, true
		case c == ' ' && !inQuote:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
