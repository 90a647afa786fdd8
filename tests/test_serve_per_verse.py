"""The server's path for each verse, over stand-in models: the sentences of one request reach the model together
(one batch a worker), and the texts of one request, or the blocks of an HTML page, reach the pysbd process in one
call."""

from test_serve import InProcessServer, post_json
from test_serve_hostile import StandInBackend

from vanilla_training.serving import paragraphs
from vanilla_training.serving.settings import ServeSettings

SENTENCES = [  # of 5, 3, 10, 7 and 8 stand-in tokens
    "The dog ran home.",
    "Hi there.",
    "Then the sun came out over the hills.",
    "We stayed inside and read.",
    "It was raining all day long.",
]


class TwoWorkerBackend(StandInBackend):
    """The stand-in shaped as CTranslate2 on 2 cores: 2 workers, 2 lanes each, batches of at most 8."""

    lanes, workers, batch_sentences = 4, 2, 8


def test_one_request_of_five_sentences_reaches_an_idle_model_as_one_batch_a_worker():
    """At an idle server a text of 5 sentences (split by pysbd) is one batch of 5 on a backend of one worker, and on
    a backend of two, two batches (the 3 shortest, the 2 longest) that its workers translate side by side."""
    by_length = sorted(SENTENCES, key=len)
    for backend, expected in (
        (StandInBackend("en", "de"), [by_length]),
        (TwoWorkerBackend("en", "de"), [by_length[:3], by_length[3:]]),
    ):
        with InProcessServer([backend], ServeSettings(cache_size=0)) as server:
            status, answer = post_json(
                server.url + "/translate", {"q": " ".join(SENTENCES), "source": "en", "target": "de"}
            )
        assert status == 200 and answer["translatedText"] == " ".join(f"[en>de] {s}" for s in SENTENCES)
        assert sorted(backend.batches) == sorted(expected), "each batch sorted by length, as the batcher sorts it"


def test_the_texts_of_a_request_and_the_blocks_of_a_page_go_to_pysbd_in_one_call(monkeypatch):
    """A list of three texts, and an HTML page of three blocks, each of two sentences: pysbd is asked once for each
    request, with every line, and each text comes back translated sentence by sentence."""
    calls = []
    segment = paragraphs.SEGMENTER.segment

    def watched(lines, language, budget):
        calls.append(list(lines))
        return segment(lines, language, budget)

    monkeypatch.setattr(paragraphs.SEGMENTER, "segment", watched)
    texts = ["One is here. Two is there.", "Three is here. Four!", "Five is here. Six?"]
    with InProcessServer([StandInBackend("en", "de")], ServeSettings()) as server:
        status, answer = post_json(server.url + "/translate", {"q": texts, "source": "en", "target": "de"})
        assert status == 200 and calls == [texts]
        assert answer["translatedText"][1] == "[en>de] Three is here. [en>de] Four!"
        page = "".join(f"<p>{text}</p>" for text in texts)
        fields = {"q": page, "source": "en", "target": "de", "format": "html"}
        status, answer = post_json(server.url + "/translate", fields)
        assert status == 200 and calls == [texts, texts]
        assert answer["translatedText"].startswith("<p>[en&gt;de] One is here. [en&gt;de] Two is there.</p>")
