package checks

// Provider returns the state of the named provider, or nil when it is not configured.
func (s *Snapshot) Provider(name string) *ProviderState {
	for i := range s.Providers {
		if s.Providers[i].Name == name {
			return &s.Providers[i]
		}
	}
	return nil
}

// Target returns the state of the named target, or nil when it has not been checked.
func (p *ProviderState) Target(name string) *TargetState {
	for i := range p.Targets {
		if p.Targets[i].Target == name {
			return &p.Targets[i]
		}
	}
	return nil
}
