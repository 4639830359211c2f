/**
 * Settings: the model whose embeddings find a chat's passages besides their words
 * (`documents_embedding_model`, `PATCH /api/node`), one of the models here, or none (words
 * alone). It is loaded on demand, as the embeddings door loads it.
 */
import { useEffect, useState } from 'react';
import { ApiError, api, errorText } from '../api/client';

export function EmbeddingModel() {
  const [models, setModels] = useState<string[]>([]);
  const [chosen, setChosen] = useState<string | null | undefined>(undefined);
  const [saved, setSaved] = useState<string | null | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    Promise.all([api.node(), api.models()])
      .then(([node, list]) => {
        setModels(list.models.map((m) => m.id));
        setChosen(node.documents_embedding_model);
        setSaved(node.documents_embedding_model);
      })
      .catch((e: unknown) => setError(errorText(e)));
  }, []);

  const save = async () => {
    if (chosen === undefined) return;
    setError(null);
    try {
      const r = await api.setEmbeddingModel(chosen);
      setSaved(r.documents_embedding_model);
    } catch (e) {
      setError(
        e instanceof ApiError && e.status === 403 ? 'Only the machine that runs the node can change this.' : errorText(e),
      );
    }
  };

  const options = chosen && !models.includes(chosen) ? [chosen, ...models] : models;
  return (
    <div className="card settings-card">
      <h2>Searching documents</h2>
      <p className="muted">
        Passages of the documents attached to a chat are found by their words. An embedding model finds them by meaning
        too (the first answer after a large file is attached waits while its passages are embedded).
      </p>
      <div className="key-form">
        <select
          data-testid="embedding-model"
          aria-label="Embedding model"
          disabled={chosen === undefined}
          value={chosen ?? ''}
          onChange={(e) => setChosen(e.target.value === '' ? null : e.target.value)}
        >
          <option value="">Words only</option>
          {options.map((id) => (
            <option key={id} value={id}>
              {id}
            </option>
          ))}
        </select>
        <button
          type="button"
          className="btn btn-primary"
          data-testid="embedding-model-save"
          disabled={chosen === undefined || chosen === saved}
          onClick={() => void save()}
        >
          Save
        </button>
      </div>
      {error && (
        <p className="form-note error" role="alert" data-testid="embedding-model-error">
          {error}
        </p>
      )}
    </div>
  );
}
