//! jsonwebtoken's cryptography on `ring`, the library rustls already links here: RS256 (the
//! internal JWT) and HS256 (the session cookies), nothing else.
//!
//! jsonwebtoken ships two backends, aws-lc-rs and RustCrypto; either would link a second
//! cryptography library beside rustls's ring (aws-lc: 2.0 MiB of the dist binary; RustCrypto: RSA,
//! P-256, P-384 and Ed25519 besides), for two algorithms (issue "Edge footprint"). Every other
//! algorithm is refused with `InvalidAlgorithm` when a key is made for it, so a token naming one
//! cannot be checked with a key meant for another (the validations pin the algorithm as well).

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::signature::{
    RSA_PKCS1_2048_8192_SHA256, RSA_PKCS1_SHA256, RsaKeyPair, RsaPublicKeyComponents, UnparsedPublicKey,
};
use ring::{hmac, rand};

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: |_| Err(ErrorKind::InvalidAlgorithm.into()),
        rsa_pub_components_from_public_key: |_| Err(ErrorKind::InvalidAlgorithm.into()),
        ec_pub_components_from_private_key: |_, _| Err(ErrorKind::InvalidAlgorithm.into()),
        ed_pub_components_from_private_key: |_, _| Err(ErrorKind::InvalidAlgorithm.into()),
        compute_digest: |_, _| Err(ErrorKind::InvalidAlgorithm.into()),
    },
};

/// Makes this the process's jsonwebtoken backend; idempotent. Whatever signs or checks a token
/// calls it first (the key holders' constructors, the CLI, the test support).
pub fn install() {
    let _ = PROVIDER.install_default();
}

fn new_signer(algorithm: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    match (algorithm, key.family()) {
        (Algorithm::RS256, AlgorithmFamily::Rsa) => {
            let pair = RsaKeyPair::from_der(key.as_bytes()).map_err(|e| ErrorKind::InvalidRsaKey(e.to_string()))?;
            Ok(Box::new(Rs256Signer(pair)))
        }
        (Algorithm::HS256, AlgorithmFamily::Hmac) => {
            Ok(Box::new(Hs256(hmac::Key::new(hmac::HMAC_SHA256, key.as_bytes()))))
        }
        (Algorithm::RS256 | Algorithm::HS256, _) => Err(ErrorKind::InvalidKeyFormat.into()),
        _ => Err(ErrorKind::InvalidAlgorithm.into()),
    }
}

fn new_verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    match (algorithm, key.family()) {
        (Algorithm::RS256, AlgorithmFamily::Rsa) => Ok(Box::new(Rs256Verifier(key.kind().clone()))),
        (Algorithm::HS256, AlgorithmFamily::Hmac) => {
            Ok(Box::new(Hs256(hmac::Key::new(hmac::HMAC_SHA256, key.try_get_as_bytes()?))))
        }
        (Algorithm::RS256 | Algorithm::HS256, _) => Err(ErrorKind::InvalidKeyFormat.into()),
        _ => Err(ErrorKind::InvalidAlgorithm.into()),
    }
}

struct Rs256Signer(RsaKeyPair);

impl Signer<Vec<u8>> for Rs256Signer {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        let mut sig = vec![0; self.0.public().modulus_len()];
        self.0
            .sign(&RSA_PKCS1_SHA256, &rand::SystemRandom::new(), msg, &mut sig)
            .map_err(|_| signature::Error::new())?;
        Ok(sig)
    }
}

impl JwtSigner for Rs256Signer {
    fn algorithm(&self) -> Algorithm {
        Algorithm::RS256
    }
}

struct Rs256Verifier(DecodingKeyKind);

impl Verifier<Vec<u8>> for Rs256Verifier {
    fn verify(&self, msg: &[u8], sig: &Vec<u8>) -> Result<(), signature::Error> {
        match &self.0 {
            DecodingKeyKind::RsaModulusExponent { n, e } => {
                RsaPublicKeyComponents { n, e }.verify(&RSA_PKCS1_2048_8192_SHA256, msg, sig)
            }
            // An RSAPublicKey (PKCS#1) DER, as `DecodingKey::from_rsa_der`/`from_rsa_pem` keep it.
            DecodingKeyKind::SecretOrDer(der) => {
                UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, der).verify(msg, sig)
            }
        }
        .map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for Rs256Verifier {
    fn algorithm(&self) -> Algorithm {
        Algorithm::RS256
    }
}

struct Hs256(hmac::Key);

impl Signer<Vec<u8>> for Hs256 {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        Ok(hmac::sign(&self.0, msg).as_ref().to_vec())
    }
}

impl Verifier<Vec<u8>> for Hs256 {
    /// Constant-time (`ring::hmac::verify`).
    fn verify(&self, msg: &[u8], sig: &Vec<u8>) -> Result<(), signature::Error> {
        hmac::verify(&self.0, msg, sig).map_err(|_| signature::Error::new())
    }
}

impl JwtSigner for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

impl JwtVerifier for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{Header, Validation, decode, encode};
    use serde_json::{Value, json};

    use super::*;

    fn rsa_key() -> crate::auth::keys::SigningKey {
        crate::auth::keys::SigningKey::generate_for_tests()
    }

    #[test]
    fn rs256_round_trips_with_components_and_refuses_another_key_or_a_changed_token() {
        install();
        let (key, other) = (rsa_key(), rsa_key());
        let ek = EncodingKey::from_rsa_pem(key.private_pem().expose().as_bytes()).unwrap();
        let token = encode(&Header::new(Algorithm::RS256), &json!({"sub": "x", "exp": 4_000_000_000u64}), &ek).unwrap();
        let v = Validation::new(Algorithm::RS256);
        let dk = DecodingKey::from_rsa_components(key.n_b64(), key.e_b64()).unwrap();
        assert_eq!(decode::<Value>(&token, &dk, &v).unwrap().claims["sub"], "x");
        let pem = DecodingKey::from_rsa_pem(key.public_pem().unwrap().as_bytes()).unwrap();
        assert_eq!(decode::<Value>(&token, &pem, &v).unwrap().claims["sub"], "x");
        let wrong = DecodingKey::from_rsa_components(other.n_b64(), other.e_b64()).unwrap();
        assert_eq!(decode::<Value>(&token, &wrong, &v).unwrap_err().kind(), &ErrorKind::InvalidSignature);
        let (head, sig) = token.rsplit_once('.').unwrap();
        let changed = format!("{head}x.{sig}");
        assert!(decode::<Value>(&changed, &dk, &v).is_err());
    }

    #[test]
    fn hs256_round_trips_and_refuses_another_secret() {
        install();
        let token = encode(
            &Header::new(Algorithm::HS256),
            &json!({"exp": 4_000_000_000u64}),
            &EncodingKey::from_secret(b"one").unwrap(),
        )
        .unwrap();
        let v = Validation::new(Algorithm::HS256);
        assert!(decode::<Value>(&token, &DecodingKey::from_secret(b"one").unwrap(), &v).is_ok());
        let err = decode::<Value>(&token, &DecodingKey::from_secret(b"two").unwrap(), &v).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidSignature);
    }

    #[test]
    fn other_algorithms_and_crossed_key_families_are_refused() {
        install();
        let key = rsa_key();
        let rsa = EncodingKey::from_rsa_pem(key.private_pem().expose().as_bytes()).unwrap();
        let secret = EncodingKey::from_secret(b"s").unwrap();
        for alg in [Algorithm::RS384, Algorithm::RS512, Algorithm::PS256, Algorithm::ES256, Algorithm::EdDSA] {
            assert!(encode(&Header::new(alg), &json!({}), &rsa).is_err(), "{alg:?} signed");
        }
        assert!(encode(&Header::new(Algorithm::HS384), &json!({}), &secret).is_err());
        // An HMAC key cannot sign RS256, nor an RSA key HS256.
        assert!(encode(&Header::new(Algorithm::RS256), &json!({}), &secret).is_err());
        assert!(encode(&Header::new(Algorithm::HS256), &json!({}), &rsa).is_err());
        // A token signed HS256 with the RSA public key's text (the classic confusion) is refused
        // by an RS256 check: the validation pins RS256, and an RSA key never verifies HS256.
        let public = key.public_pem().unwrap();
        let forged = encode(
            &Header::new(Algorithm::HS256),
            &json!({"exp": 4_000_000_000u64}),
            &EncodingKey::from_secret(public.as_bytes()).unwrap(),
        )
        .unwrap();
        let dk = DecodingKey::from_rsa_components(key.n_b64(), key.e_b64()).unwrap();
        assert!(decode::<Value>(&forged, &dk, &Validation::new(Algorithm::RS256)).is_err());
        assert!(decode::<Value>(&forged, &dk, &Validation::new(Algorithm::HS256)).is_err());
    }
}
