package runtime

import (
	"regexp"
)

// Pod and container metadata reach CNI_ARGS (K8S_POD_NAME=...;K8S_POD_NAMESPACE=...),
// containerd labels and file names, so they are held to the Kubernetes rules for
// object names, with upper-case letters allowed (critest uses names such as
// "PodSandbox-for-..."): DNS-1123 subdomain for names, DNS-1123 label for namespaces,
// letters, digits, '-' and '.' for uids. ';', '=', '/', '_', spaces and NUL never pass.
var (
	dnsLabelRE     = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?$`)
	dnsSubdomainRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*$`)
	uidRE          = regexp.MustCompile(`^[A-Za-z0-9]([-.A-Za-z0-9]*[A-Za-z0-9])?$`)
)

const (
	maxNameLen      = 253
	maxNamespaceLen = 63
	maxUIDLen       = 128
)

// validateObjectName checks a pod or container name.
func validateObjectName(field, v string) error {
	return matchName(field, v, maxNameLen, dnsSubdomainRE,
		"letters, digits, '-' and '.', starting and ending with a letter or digit")
}

// validateNamespaceName checks a pod namespace.
func validateNamespaceName(field, v string) error {
	return matchName(field, v, maxNamespaceLen, dnsLabelRE,
		"letters, digits and '-', starting and ending with a letter or digit")
}

// validateUID checks a pod uid.
func validateUID(field, v string) error {
	return matchName(field, v, maxUIDLen, uidRE, "letters, digits, '-' and '.'")
}

func matchName(field, v string, maxLen int, re *regexp.Regexp, rule string) error {
	switch {
	case v == "":
		return invalid(field, "is required")
	case len(v) > maxLen:
		return invalid(field, "is %d characters long, more than %d", len(v), maxLen)
	case !re.MatchString(v):
		return invalid(field, "%q may hold only %s", v, rule)
	}
	return nil
}
