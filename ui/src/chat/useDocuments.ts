/**
 * A conversation's documents as the chat shows them: those the node keeps (listed when the
 * conversation opens), those being sent and read now, and why the last one was refused. Files
 * are sent one at a time, each as it is, and kept in order as the node answers.
 */
import { useCallback, useEffect, useRef, useState } from 'react';
import { api, errorText } from '../api/client';
import type { DocumentInfo } from '../api/types';
import { screenDocuments } from './documents';

/** A file being sent and read. */
export interface Reading {
  key: string;
  /** The conversation it goes to. */
  of: string;
  name: string;
  size: number;
}

let readings = 0;

export function useDocuments(conversationId: string | null) {
  const [kept, setKept] = useState<{ of: string | null; documents: DocumentInfo[] }>({ of: null, documents: [] });
  const [reading, setReading] = useState<Reading[]>([]);
  // Why a file was refused, and the conversation it was for.
  const [refusal, setRefusal] = useState<{ of: string; text: string } | null>(null);
  const pending = useRef<Reading[]>([]);

  useEffect(() => {
    setRefusal(null);
    if (!conversationId) {
      setKept({ of: null, documents: [] });
      return;
    }
    let live = true;
    api.listDocuments(conversationId).then(
      (listed) =>
        live &&
        // One kept meanwhile (a fast upload) stays, after those listed.
        setKept((now) => ({
          of: conversationId,
          documents: [...listed, ...(now.of === conversationId ? now.documents.filter((d) => !listed.some((l) => l.id === d.id)) : [])],
        })),
      (e: unknown) => live && setRefusal({ of: conversationId, text: errorText(e) }),
    );
    return () => {
      live = false;
    };
  }, [conversationId]);

  const keep = (of: string, document: DocumentInfo) =>
    setKept((now) => {
      if (now.of !== of) return now;
      if (now.documents.some((d) => d.id === document.id)) return now;
      return { of, documents: [...now.documents, document] };
    });

  /** Send `files` to the conversation `of`, one after another. */
  const add = useCallback(
    async (of: string, files: File[]) => {
      const already = (kept.of === of ? kept.documents.length : 0) + pending.current.filter((r) => r.of === of).length;
      const { taken, refused } = screenDocuments(files, already);
      setRefusal(refused[0] ? { of, text: refused[0] } : null);
      const these = taken.map((f) => ({ key: `doc-${++readings}`, of, name: f.name, size: f.size }));
      pending.current = [...pending.current, ...these];
      setReading(pending.current);
      for (const [i, f] of taken.entries()) {
        try {
          const { document } = await api.addDocument(of, f, f.name);
          keep(of, document);
        } catch (e) {
          setRefusal({ of, text: errorText(e) });
        } finally {
          pending.current = pending.current.filter((r) => r.key !== these[i].key);
          setReading(pending.current);
        }
      }
    },
    [kept],
  );

  const remove = useCallback(async (of: string, documentId: string) => {
    try {
      await api.removeDocument(of, documentId);
      setKept((now) => (now.of === of ? { of, documents: now.documents.filter((d) => d.id !== documentId) } : now));
    } catch (e) {
      setRefusal({ of, text: errorText(e) });
    }
  }, []);

  return {
    documents: kept.of === conversationId ? kept.documents : [],
    reading: reading.filter((r) => r.of === conversationId),
    refusal: refusal && refusal.of === conversationId ? refusal.text : null,
    dismiss: () => setRefusal(null),
    add,
    remove,
  };
}
