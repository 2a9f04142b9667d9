package providers

import (
	"context"
	"errors"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
)

// ModelLister is a provider that can list the model ids its endpoint
// serves (`herald doctor` checks the configured models against it).
type ModelLister interface {
	ListModels(ctx context.Context) ([]string, error)
}

// ListModels asks the Models API (GET /v1/models), every page.
func (p *anthropicProvider) ListModels(ctx context.Context) ([]string, error) {
	var ids []string
	it := p.client.Models.ListAutoPaging(ctx, anthropic.ModelListParams{})
	for it.Next() {
		ids = append(ids, it.Current().ID)
	}
	return ids, it.Err()
}

// ListModels asks GET <baseUrl>/models, every page.
func (p *openAIProvider) ListModels(ctx context.Context) ([]string, error) {
	var ids []string
	it := p.client.Models.ListAutoPaging(ctx)
	for it.Next() {
		ids = append(ids, it.Current().ID)
	}
	return ids, it.Err()
}

// ListModels lists the one offline model.
func (d *Demo) ListModels(context.Context) ([]string, error) { return []string{"demo"}, nil }

// StatusOf returns the HTTP status of a provider API error from either SDK,
// 0 when err is not one.
func StatusOf(err error) int {
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	var oe *openai.Error
	if errors.As(err, &oe) {
		return oe.StatusCode
	}
	return 0
}
