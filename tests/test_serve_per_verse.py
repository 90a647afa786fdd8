"""The server's path for each verse, over stand-in models: the sentences of one request reach the model together
(one batch a worker), and text that holds no sentence boundary is taken whole without the pysbd process."""

from test_serve import InProcessServer, post_json
from test_serve_hostile import StandInBackend

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
